"""``helpers.exercises.mutation``: what an answer changed in its inputs, in words, and how the input is named.

The engine's use of it (an answer that changes an input fails, naming it) is tested in ``test_checking.py``
and, for every exercise of the course, in ``test_exercise_contract.py``; here, each kind of input.
"""
import copy
import types
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from helpers.exercises.mutation import argument_names, changed_input, describe_change


def test_tensors_values_shape_and_nan():
    x = torch.tensor([[1.0, float("nan")], [3.0, 4.0]])
    assert describe_change(x, x.clone()) is None  # NaN equals NaN: nothing changed
    y = x.clone()
    y[1, 0] = 0.0
    assert describe_change(x, y) == "1 of 4 values changed, first at index (1, 0): was 3, now 0"
    assert describe_change(x, x.clone().resize_(4)) == "its shape changed from (2, 2) to (4,)"
    assert describe_change(torch.tensor(2.0), torch.tensor(3.0)) == "its value: was 2, now 3"
    ints = torch.arange(6)
    assert describe_change(ints, ints.clone().mul_(2)).startswith("5 of 6 values changed, first at index (1,)")
    grads = torch.ones(3, requires_grad=True)
    after = grads.detach().clone().requires_grad_()
    after.grad = torch.ones(3)                    # a gradient is not an input: not compared
    assert describe_change(grads, after) is None


def test_arrays_lists_dicts_and_nesting():
    a = np.arange(4.0)
    b = a.copy()
    b[2] = 7
    assert describe_change(a, b) == "1 of 4 values changed, first at index (2,): was 2, now 7"
    layers = [(torch.ones(2), torch.zeros(2)), (torch.ones(2), torch.zeros(2))]
    changed = copy.deepcopy(layers)
    changed[1][0].add_(1)
    assert describe_change(layers, changed) == "item [1][0]: 2 of 2 values changed, first at index (0,): " \
        "was 1, now 2"
    assert describe_change([1, 2], [1, 2, 3]) == "its length changed from 2 to 3"
    assert describe_change({"w": torch.ones(1)}, {"w": torch.ones(1), "b": 0}) == "its keys changed: 'b' added"
    assert describe_change({"w": torch.ones(1)}, {"w": torch.zeros(1)}) == "item ['w']: its value: was 1, now 0"
    assert describe_change((1, "text", None), (1, "text", None)) is None


def test_modules_parameters_buffers_freezing_and_mode():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    assert describe_change(net, copy.deepcopy(net)) is None
    edited = copy.deepcopy(net)
    with torch.no_grad():
        edited[0].weight[0, 1] = 5.0
    assert describe_change(net, edited).startswith("its parameter '0.weight': 1 of 6 values changed, first at "
                                                   "index (0, 1): was ")
    frozen = copy.deepcopy(net).requires_grad_(False)
    assert describe_change(net, frozen) == "its parameter '0.weight' was frozen (requires_grad=False)"
    assert describe_change(net, copy.deepcopy(net).eval()) == "it was switched to eval mode"
    half = copy.deepcopy(net)
    half[1].eval()
    assert describe_change(net, half) == "its submodule '1' was switched to eval mode"
    ran = copy.deepcopy(net)
    ran(torch.randn(4, 3))                        # training mode: BatchNorm updates its running mean
    assert describe_change(net, ran).startswith("its buffer '1.running_mean': 2 of 2 values changed")
    stale = copy.deepcopy(net)
    stale[0](torch.randn(2, 3)).sum().backward()  # gradients filled in: not a change of the input
    assert describe_change(net, stale) is None


def test_dataclasses_and_namespaces():
    @dataclass
    class Config:
        k: int
        scale: torch.Tensor
    before = Config(2, torch.ones(2))
    assert describe_change(before, Config(3, torch.ones(2))) == "its attribute 'k': was 2, now 3"
    assert describe_change(types.SimpleNamespace(x=torch.ones(1)), types.SimpleNamespace(x=torch.ones(1))) is None


def test_arguments_are_named_as_the_learner_named_them():
    def top_sub_updates(m, W2, b2, k):
        pass
    assert argument_names(top_sub_updates, 4) == ["`m`", "`W2`", "`b2`", "`k`"]
    assert argument_names(lambda *args: None, 2) == ["`args[0]`", "`args[1]`"]
    assert argument_names(lambda a, *rest: None, 3) == ["`a`", "`rest[0]`", "`rest[1]`"]
    assert argument_names(print, 2)[:1] in (["the 1st argument"], ["`args[0]`"])  # a builtin may have no signature
    assert argument_names(lambda: None, 2) == ["the 1st argument", "the 2nd argument"]  # more than it takes


def test_changed_input_names_the_first_changed_argument_and_keyword():
    m, w = torch.ones(2, 3), torch.ones(3)
    given = (m.clone(), w.clone()), {"scale": torch.ones(1)}
    given[0][1].zero_()
    given[1]["scale"].add_(1)
    found = changed_input(lambda m, w, scale: None, ((m, w), {"scale": torch.ones(1)}), given)
    assert found == ("`w`", "3 of 3 values changed, first at index (0,): was 1, now 0")
    only_keyword = changed_input(lambda m, w, scale: None, ((m, w), {"scale": torch.ones(1)}),
                                 ((m.clone(), w.clone()), {"scale": torch.full((1,), 2.0)}))
    assert only_keyword == ("`scale`", "its value: was 1, now 2")
    assert changed_input(lambda m, w: None, ((m, w), {}), ((m.clone(), w.clone()), {})) is None
