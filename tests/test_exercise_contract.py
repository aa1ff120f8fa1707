"""The contract every exercise checker keeps, tested once for all of them.

Every ``Exercise`` instance in every ``helpers.exercises.nb*`` module is discovered at
collection time, so a new notebook's checkers (or a mistake a reviewer adds) are covered
without touching this file. For each exercise:

* the reference's logic passes (a function of the learner's that calls it), and there are at least 4 hidden
  cases, identical between calls; the reference itself, handed in as the answer, does not pass (it is the
  checker's own code);
* an answer right in value that changes one of its inputs in place fails, naming that input;
* both blank forms (``raise NotImplementedError`` and a body that returns ``None``) are
  "not attempted";
* there are at least 3 listed mistakes (2 for a debug exercise with ``buggy=``, a third model)
  and each one fails with ``Likely mistake: <its hint>``;
* a debug exercise names its function as given (``buggy=``), which fails with the symptom only, before and
  after other failures, and a listed mistake's hint shows only once a failure has been shown (the ladder);
* the reference computed in float32 (every float64 input converted) passes or is told that it
  matches only to float32 precision, or, on a hidden case float32 cannot carry, is told what differs there:
  never a named mistake;
* ``check`` prints exactly one line (with the right icon) for a stub, the reference and a mistake;
* ``evaluate`` never raises, whatever the learner hands it;
* the title reads ``Exercise N (short name)`` and its verdict line parses back; ``kind`` is one of ``KINDS``;
* every checker module lists all its exercises in ``EXERCISES`` (the grader reads it);
* a hanging function gets a time-limit verdict within the limit (and the kernel's alarm is left clean);
* a function that returns ``None`` on one case only is "incomplete", not "not attempted";
* integer results print exactly when they differ (no ``4.72346e+06``);
* the reference passes with autograd disabled in the kernel (``torch.set_grad_enabled(False)``, inference mode).

Each notebook's own file (``tests/test_exercises_NN.py``) keeps what is specific to it:
unlisted wrong answers, particular messages, other correct forms and the like.
"""
import contextlib
import copy
import importlib
import io
import pkgutil
import re
import signal
import time

import pytest
import torch
from torch import nn

from helpers import exercises
from helpers.exercises.compare import DTYPE_TOLERANCES
from helpers.exercises.engine import CHANGED_INPUT, CHECKERS_CODE, CLUE_PREFIX, FAILED, HINT_PREFIX, ICONS, KINDS, \
    NOT_ATTEMPTED, PASSED, Exercise, compare, parse_line

MIN_EXERCISES_PER_MODULE = 4
MIN_CASES = 4
MIN_MISTAKES = 3
MIN_MISTAKES_DEBUG = 2  # wrong fixes; the buggy= original is a third model (it names a partial fix)


def _exercise_modules():
    names = sorted(info.name for info in pkgutil.iter_modules(exercises.__path__) if info.name.startswith("nb"))
    return [importlib.import_module(f"{exercises.__name__}.{name}") for name in names]


def _discover(modules):
    """``(id, exercise)`` for every module-level ``Exercise``, first name wins for an object seen twice."""
    seen, found = set(), []
    for module in modules:
        short = module.__name__.rsplit(".", 1)[-1]
        for attr, value in vars(module).items():  # definition order
            if isinstance(value, Exercise) and id(value) not in seen:
                seen.add(id(value))
                found.append((f"{short}.{attr}", value))
    return found


MODULES = _exercise_modules()
DISCOVERED = _discover(MODULES)
EXERCISES = [ex for _, ex in DISCOVERED]
IDS = [name for name, _ in DISCOVERED]
MISTAKES = [(ex, i) for ex in EXERCISES for i in range(len(ex.mistakes))]
MISTAKE_IDS = [f"{name}-mistake{i}" for name, ex in DISCOVERED for i in range(len(ex.mistakes))]
WITH_BUGGY = [(name, ex) for name, ex in DISCOVERED if getattr(ex, "buggy", None) is not None]
DEBUG = [(name, ex) for name, ex in DISCOVERED if ex.kind == "debug"]


def _as_learner(fn):
    """A learner's function that computes what ``fn`` computes (the checker's own function never passes)."""
    def answer(*args, **kwargs):
        return fn(*args, **kwargs)
    return answer


def _after_a_failure(ex):
    """A debug exercise on its ladder's second step: a failure has been shown in this kernel."""
    ex.forget()
    if ex.kind == "debug":
        with contextlib.redirect_stdout(io.StringIO()):
            ex.check(ex.buggy)
    return ex


def stub(*args, **kwargs):
    raise NotImplementedError


def returns_none(*args, **kwargs):
    return None


def _raises_runtime_error(*args, **kwargs):
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


#: what a learner might hand the checker: none of it may make ``evaluate`` raise
HOSTILE = {
    "raises_RuntimeError": _raises_runtime_error,
    "raises_ZeroDivisionError": lambda *a, **k: 1 / 0,
    "returns_a_string": lambda *a, **k: "text",
    "returns_nan": lambda *a, **k: float("nan"),
    "returns_a_wrong_shaped_tensor": lambda *a, **k: torch.zeros(2, 2),
    "zeroes_its_inputs_returns_text": lambda *a, **k: [t.zero_() for t in a if isinstance(t, torch.Tensor)
                                                       and t.is_floating_point()] and "text",
    "not_callable_int": 42,
    "not_callable_str": "not a function",
}


def test_every_exercise_module_is_discovered():
    names = [module.__name__ for module in MODULES]
    assert [f"helpers.exercises.nb{n:02d}" for n in range(1, 7)] == names[:6], names
    assert len(EXERCISES) >= MIN_EXERCISES_PER_MODULE * len(MODULES)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_module_has_enough_exercises(module):
    own = [ex for ex in vars(module).values() if isinstance(ex, Exercise)]
    assert len({id(ex) for ex in own}) >= MIN_EXERCISES_PER_MODULE


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_module_lists_all_its_exercises(module):
    """``EXERCISES``: every Exercise of the module, each once, in the notebook's order (the grader reads it)."""
    listed = getattr(module, "EXERCISES", None)
    assert isinstance(listed, list), f"{module.__name__} has no EXERCISES list"
    own = {id(ex) for ex in vars(module).values() if isinstance(ex, Exercise)}
    assert all(isinstance(ex, Exercise) for ex in listed) and len({id(ex) for ex in listed}) == len(listed)
    assert {id(ex) for ex in listed} == own
    numbers = [int(re.match(r"\d+", ex.number).group()) for ex in listed]
    assert numbers == sorted(numbers), [ex.title for ex in listed]


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_reference_passes(ex):
    result = ex.evaluate(_as_learner(ex.reference))
    assert result.status == PASSED, result.message
    assert len(ex.cases()) >= MIN_CASES


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_the_reference_itself_is_not_an_answer(ex):
    """``f = check_x.reference`` (or any function of the checker's module) never passes, and says why."""
    import functools
    for fn in (ex.reference, functools.partial(ex.reference)):
        result = ex.evaluate(fn)
        assert result.status == FAILED and result.reason == CHECKERS_CODE, result.message
        assert result.message.startswith("this is the checker's own code"), result.message


def _first_mutable(args):
    """The index of the first argument an answer could change in place: a float tensor or a module."""
    for i, arg in enumerate(args):
        if isinstance(arg, torch.Tensor) and arg.is_floating_point() and arg.numel():
            return i
        if isinstance(arg, nn.Module) and any(p.numel() for p in arg.parameters()):
            return i
    return None


MUTABLE = [(name, ex) for name, ex in DISCOVERED if any(_first_mutable(c.args) is not None for c in ex.cases())]


@pytest.mark.parametrize("ex", [ex for _, ex in MUTABLE], ids=[name for name, _ in MUTABLE])
def test_a_right_answer_that_changes_an_input_in_place_fails_naming_it(ex):
    """The trial's 09 Exercise 4 in general: the right result, and the first float tensor (or module) argument
    changed in place afterwards. It fails, naming the argument by the learner's parameter name."""
    n_args = min(len(c.args) for c in ex.cases())
    names = list(__import__("inspect").signature(ex.reference).parameters)[:n_args]

    def changes_its_input(*args):
        result = ex.reference(*copy.deepcopy(args))
        index = _first_mutable(args)
        if index is not None:
            with torch.no_grad():
                target = args[index]
                for tensor in ([target] if isinstance(target, torch.Tensor) else list(target.parameters())[:1]):
                    tensor.view(-1)[0] += 1.0
        return result
    learner = eval(f"lambda {', '.join(names)}, *rest: changes_its_input({', '.join(names)}, *rest)",
                   {"changes_its_input": changes_its_input})
    result = ex.evaluate(learner)
    assert result.status == FAILED and result.reason == CHANGED_INPUT, result.message
    assert re.match(r"your function changed its input `\w+` in place \(", result.message), result.message
    assert any(f"`{name}`" in result.message for name in names), result.message


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_blank_answers_are_not_attempted(ex):
    assert ex.evaluate(stub).status == NOT_ATTEMPTED
    assert ex.evaluate(lambda *a: None).status == NOT_ATTEMPTED
    assert ex.evaluate(returns_none).status == NOT_ATTEMPTED


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_enough_listed_mistakes(ex):
    assert len(ex.mistakes) >= (MIN_MISTAKES_DEBUG if getattr(ex, "buggy", None) is not None else MIN_MISTAKES)
    hints = [hint for hint, _ in ex.mistakes]
    assert len(set(hints)) == len(hints), "two mistakes share a hint"


@pytest.mark.parametrize("ex, index", MISTAKES, ids=MISTAKE_IDS)
def test_each_listed_mistake_fails_with_its_own_hint(ex, index):
    hint, wrong = ex.mistakes[index]
    result = _after_a_failure(ex).evaluate(wrong)
    assert result.status == FAILED, hint
    assert "Likely mistake: " + hint in result.message, (hint, result.message)


@pytest.mark.parametrize("ex", [ex for _, ex in DEBUG], ids=[name for name, _ in DEBUG])
def test_a_debug_exercise_shows_the_symptom_only_for_its_function_as_given(ex):
    assert ex.buggy is not None, "a debug exercise names its function as given (buggy=)"
    for state in (ex.forget, lambda: _after_a_failure(ex)):
        state()
        result = ex.evaluate(ex.buggy)
        assert result.status == FAILED and result.reason == "unchanged" and result.hint is None, result.message
        assert HINT_PREFIX not in result.message and CLUE_PREFIX not in result.message, result.message
        assert " (on " in result.message and "still does what the function as given does" in result.message


@pytest.mark.parametrize("ex, index", [(ex, i) for ex, i in MISTAKES if ex.kind == "debug"],
                         ids=[m for m, (ex, _) in zip(MISTAKE_IDS, MISTAKES) if ex.kind == "debug"])
def test_a_debug_exercise_names_no_mistake_on_its_first_failure(ex, index):
    ex.forget()
    result = ex.evaluate(ex.mistakes[index][1])
    assert result.status == FAILED and result.hint is None and CLUE_PREFIX not in result.message, result.message


def _to_float32(value):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
        return value.float()
    if isinstance(value, nn.Module):
        return copy.deepcopy(value).float()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_float32(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_float32(v) for k, v in value.items()}
    return value


def _like(value, reference):
    """``value`` converted back to the type and dtype of ``reference`` (a float64 tensor, a Python float)."""
    if isinstance(reference, torch.Tensor) and isinstance(value, torch.Tensor):
        return value.to(reference.dtype)
    if isinstance(reference, float) and isinstance(value, torch.Tensor):
        return float(value)
    if isinstance(reference, (tuple, list)) and isinstance(value, (tuple, list)):
        return type(reference)(_like(v, r) for v, r in zip(value, reference))
    if isinstance(reference, dict) and isinstance(value, dict):
        return {k: _like(value[k], reference[k]) for k in reference}
    return value


def _beyond_float32(value, exact):
    """Does a float32 computation's ``value`` differ from the float64 ``exact`` by more than float32's relative
    precision (a case float32 cannot carry: a mean of 1e7 with noise of order 1, a nearly singular inverse)?"""
    rtol = DTYPE_TOLERANCES[torch.float32][1]
    if isinstance(exact, torch.Tensor) and exact.is_floating_point():
        gap = (torch.as_tensor(value).double() - exact.double()).abs().max()
        return bool(gap > rtol * exact.double().abs().max())
    if isinstance(exact, float):
        return abs(float(value) - exact) > rtol * abs(exact)
    if isinstance(exact, (tuple, list)):
        return any(_beyond_float32(v, e) for v, e in zip(value, exact))
    if isinstance(exact, dict):
        return any(_beyond_float32(value[k], exact[k]) for k in exact)
    return False


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_the_reference_in_float32_is_never_called_wrong(ex):
    """A learner who computes in float32 gets a pass or the precision note, never a wrong-answer hint.

    Where a hidden case is an extreme that float32 cannot carry (a mean of 1e7 with noise of order 1, a nearly
    singular matrix inverted), the float32 answer is really wrong there: the verdict then says what differs (a
    wrong answer gets no precision note), and only such a case may be the one it names."""
    def in_float32(*args, **kwargs):
        exact = ex.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        return _like(ex.reference(*_to_float32(args), **_to_float32(kwargs)), exact)
    result = ex.evaluate(in_float32)
    assert result.hint is None or "float32" in result.hint, result.message
    assert CLUE_PREFIX not in result.message, result.message
    if result.status == PASSED or result.reason == "precision":
        return
    extremes = [c.describe() for c in ex.cases()
                if _beyond_float32(in_float32(*copy.deepcopy(c.args), **copy.deepcopy(c.kwargs)),
                                   ex.reference(*copy.deepcopy(c.args), **copy.deepcopy(c.kwargs)))]
    assert result.reason == "wrong" and extremes and any(f"(on {d}" in result.message for d in extremes), \
        (result.message, extremes)


def _same_input(a, b):
    """``None`` when two case arguments are the same value (modules: same type, layout and weights)."""
    if isinstance(a, nn.Module) or isinstance(b, nn.Module):
        if type(a) is not type(b) or repr(a) != repr(b):
            return f"different modules: {a!r} vs {b!r}"
        return compare(b.state_dict(), a.state_dict(), atol=0, rtol=0)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return next((p for p in map(_same_input, a, b) if p), None)
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return next((p for k in a if (p := _same_input(a[k], b[k]))), None)
    return compare(b, a, atol=0, rtol=0)


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_hidden_cases_are_identical_between_calls(ex):
    """Hidden cases are seeded: two calls build the same inputs (so verdicts never flicker)."""
    first, second = ex.cases(), ex.cases()
    assert len(first) == len(second)
    for i, (a, b) in enumerate(zip(first, second)):
        assert a.note == b.note, i
        assert _same_input(a.args, b.args) is None, (i, _same_input(a.args, b.args))
        assert _same_input(a.kwargs, b.kwargs) is None, (i, _same_input(a.kwargs, b.kwargs))


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_check_prints_exactly_one_line(ex, capsys):
    hint, wrong = ex.mistakes[0]
    _after_a_failure(ex)
    for fn, status, words in [(stub, NOT_ATTEMPTED, "not attempted yet"), (_as_learner(ex.reference), PASSED, "passed"),
                              (wrong, FAILED, "Likely mistake: " + hint)]:
        ex.check(fn)
        out = capsys.readouterr().out
        assert out.endswith("\n") and out.count("\n") == 1, out
        assert out.startswith(f"{ICONS[status]} {ex.title}: ") and words in out, out


@pytest.mark.parametrize("bad", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_evaluate_never_raises_on_hostile_input(ex, bad):
    result = ex.evaluate(bad)
    assert result.status == FAILED, result.message
    assert result.message and "the checker could not compare" not in result.message, result.message
    if bad is _raises_runtime_error:
        assert "raised RuntimeError" in result.message, result.message
    if bad is HOSTILE["raises_ZeroDivisionError"]:
        assert "ZeroDivisionError" in result.message, result.message


TITLE_RE = re.compile(r"^Exercise \d+[a-z]? \(.+\)$")


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_title_kind_and_line_format(ex):
    assert TITLE_RE.match(ex.title) and ": " not in ex.title, \
        f"title should read 'Exercise N (short name)': {ex.title!r}"
    assert ex.kind in KINDS
    for fn in (stub, ex.reference, _as_learner(ex.reference), ex.mistakes[0][1]):
        line = ex.evaluate(fn).line()
        assert "\n" not in line and parse_line(line)[1] == ex.title, line


def _hang(*args, **kwargs):
    while True:
        pass


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_a_hanging_function_is_stopped_within_the_time_limit(ex, monkeypatch):
    limit = 0.5
    monkeypatch.setattr(ex, "time_limit", limit)
    start = time.monotonic()
    result = ex.evaluate(_hang)
    seconds = time.monotonic() - start
    assert result.status == FAILED and result.message.startswith("time limit: your function "), result.message
    assert f"{limit:g} s of computing time" in result.message, result.message
    assert seconds < 3 * limit + 5, seconds  # the wall-time backstop, plus building the hidden cases
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0 and signal.getsignal(signal.SIGALRM) in (
        signal.SIG_DFL, signal.default_int_handler, None)


def _none_on_call(ex, which):
    """A function right on every case except the call number ``which`` (0-based), where it returns None."""
    calls = []

    def answer(*args, **kwargs):
        calls.append(1)
        return None if len(calls) - 1 == which else ex.reference(*args, **kwargs)
    return answer


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_none_on_one_case_only_is_incomplete(ex):
    n_cases = len(ex.cases())
    for which in (n_cases - 1, 0):
        result = ex.evaluate(_none_on_call(ex, which))
        assert result.status == FAILED and result.message.startswith("incomplete: your function returned None on "), \
            result.message


def _bump_first_int(value):
    """``(copy with its first integer leaf + 1, that leaf)``, or ``None`` when ``value`` holds no integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value + 1, value
    if isinstance(value, torch.Tensor) and value.numel() and not value.is_floating_point() \
            and value.dtype != torch.bool and not value.is_complex():
        bumped = value.clone()
        bumped.view(-1)[0] += 1
        return bumped, int(value.view(-1)[0])
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            found = _bump_first_int(item)
            if found:
                items = list(value)
                items[i] = found[0]
                return type(value)(items) if isinstance(value, list) else tuple(items), found[1]
    if isinstance(value, dict):
        for key, item in value.items():
            found = _bump_first_int(item)
            if found:
                return {**value, key: found[0]}, found[1]
    return None


def _first_case_output(ex):
    case = ex.cases()[0]
    return ex.reference(*case.args, **case.kwargs)


INTEGER_EXERCISES = [(name, ex) for name, ex in DISCOVERED if _bump_first_int(_first_case_output(ex))]


@pytest.mark.parametrize("ex", [ex for _, ex in INTEGER_EXERCISES], ids=[name for name, _ in INTEGER_EXERCISES])
def test_integer_results_print_exactly(ex):
    _, leaf = _bump_first_int(_first_case_output(ex))
    result = ex.evaluate(lambda *args, **kwargs: _bump_first_int(ex.reference(*args, **kwargs))[0])
    assert result.status == FAILED and f"expected {leaf}, got {leaf + 1}" in result.message, result.message


def test_some_exercises_have_integer_results():
    assert len(INTEGER_EXERCISES) >= 3, "the integer check above would be empty"


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_the_reference_passes_with_autograd_disabled_in_the_kernel(ex):
    torch.set_grad_enabled(False)
    try:
        result = ex.evaluate(_as_learner(ex.reference))
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    assert result.status == PASSED, result.message
    with torch.inference_mode():
        result = ex.evaluate(_as_learner(ex.reference))
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_hidden_cases_reach_every_corner_of_the_declared_domain(exercise):
    """COURSE_DESIGN.md, the exercise contract: each exercise declares the domain its statement allows
    (``domain=Domain(...)``) and its hidden cases reach every corner of it (``Exercise.uncovered``)."""
    assert exercise.domain is not None, f"{exercise.title} declares no domain (domain=Domain(allows, corners))"
    assert exercise.uncovered() == [], f"{exercise.title}: no hidden case reaches these corners"



def test_a_wrapper_around_the_reference_is_the_checkers_own_code():
    """Trial learner 2026-11-27h: `def f(x): return check_x.reference(x)` passed (only the object was compared).
    The answers are compiled as a notebook cell is (not from a file of the course)."""
    cell = """
from helpers.exercises import nb01
from helpers.exercises.nb01 import check_collapse

def direct(layers):
    return check_collapse.reference(layers)

def through_the_module(layers):
    return nb01.check_collapse.reference(layers)

def helper(layers):
    return check_collapse.reference(layers)

def through_a_helper(layers):
    return helper(layers)

by_default = lambda layers, r=check_collapse.reference: r(layers)
"""
    scope: dict = {}
    exec(compile(cell, "/tmp/ipykernel_0/cell.py", "exec"), scope)
    check = scope["check_collapse"]
    for name in ("direct", "through_the_module", "through_a_helper", "by_default"):
        result = check.evaluate(scope[name])
        assert result.status == "failed" and "checker's own code" in result.message, (name, result.message)


def test_a_wrapper_in_a_console_pseudo_file_is_still_the_checkers_own_code():
    """Older IPython names a cell '<ipython-input-…>', which resolves under the working directory (the repository
    when a notebook runs from notebooks/): such a name is never a course file."""
    scope: dict = {}
    exec(compile("from helpers.exercises.nb01 import check_collapse\nf = lambda layers: check_collapse.reference(layers)",
                 "<ipython-input-1-0123456789ab>", "exec"), scope)
    result = scope["check_collapse"].evaluate(scope["f"])
    assert result.status == "failed" and "checker's own code" in result.message, result.message
