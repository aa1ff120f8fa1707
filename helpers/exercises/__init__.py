"""The course's exercise machinery, kept apart from the library the notebooks study.

engine     ``Exercise``, ``Case``, ``Result``: run a learner's function on hidden cases, print one verdict line
compare    how an answer differs from the reference's (tolerances by dtype, the precision note)
timelimit  the time limit on a learner's function
cases      random inputs for hidden cases (masks, adversarial rows, SPD matrices), shared by the checkers
nbNN       the checkers for notebook NN's exercises (``from helpers.exercises.nb03 import check_...``)
grader     run whole notebooks and grade them (``python -m helpers.grade PATH...``), with
matching   (which course notebook a submission is), kernel (running it), gradebook (points, CSV, feedback)
"""
