"""The course's exercise machinery, kept apart from the library the notebooks study.

engine  ``Exercise``, ``Case``, ``Result``: run a learner's function on hidden cases, print one verdict line
nbNN    the checkers for notebook NN's exercises (``from helpers.exercises.nb03 import check_...``)
grader  run whole notebooks and tabulate their verdicts (``python -m helpers.grade PATH...``)
"""
