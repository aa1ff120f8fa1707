"""Grade learner notebooks: ``python -m helpers.grade PATH...`` (a notebook, several, or a folder).

Runs each notebook top to bottom in a fresh kernel, matches it to its course notebook by content
(a "Copy of ..." or a renamed file is still notebook 05), collects every checker's verdict and
prints a table submission × exercise with points. ``--csv FILE`` writes a gradebook (one row per
student folder), ``--feedback DIR`` a Markdown file per student, ``--json FILE`` everything,
``--points FILE`` overrides the points. A path that does not exist or an output that cannot be
written stops it before anything runs (exit status 2, nothing written); otherwise the exit status
is 0 only when every exercise passed. Options:
``python -m helpers.grade --help``; the machinery is ``helpers.exercises.grader``. Also runs as
``python path/to/helpers/grade.py PATH...`` from any folder.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the course's root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.exercises.grader import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
