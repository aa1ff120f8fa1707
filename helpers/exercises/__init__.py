"""The course's exercise machinery, kept apart from the library the notebooks study.

engine     ``Exercise``: run a learner's function on hidden cases, print one verdict line
verdict    a verdict's statuses, its one line, ``parse_line`` and the log the grader reads
compare    how an answer differs from the reference's (tolerances by dtype, the relative precision note)
mutation   did the learner's function change one of its inputs in place, and which
sandbox    the state a check runs in (autograd on, float32 default, the kernel's state restored)
timelimit  the time limit on a learner's function
cases      a hidden case (``Case``), a statement's ``Domain`` and its corners, random inputs (masks, SPD matrices)
nbNN       the checkers for notebook NN's exercises (``from helpers.exercises.nb03 import check_...``); each
           lists its exercises in ``EXERCISES``
grader     run whole notebooks and grade them (``python -m helpers.grade PATH...``), with
matching   (which course notebook a submission is), kernel (running it), gradebook (points, CSV, feedback)
"""
