"""helpers.fact_model: notebook 03's shipped models load, know every fact, were made by the repository's command
from the seeded initialisation, and the command itself works (tested on a short run)."""
import pytest
import torch

from helpers import fact_model
from helpers.fact_model import (FACT_MODEL, FACT_MODEL_SEEDS, fact_model_config, fact_model_path, load_fact_model,
                                save_fact_model, train_fact_model, untrained_fact_model)
from helpers.facts import load_facts, make_dataset
from helpers.transformer import answer_accuracy


@pytest.fixture(scope="module")
def facts_data():
    return make_dataset(load_facts())


@pytest.mark.parametrize("seed", FACT_MODEL_SEEDS)
def test_shipped_checkpoint_loads_into_the_notebook_config_and_knows_every_fact(facts_data, seed):
    path = fact_model_path(seed)
    assert path.is_file() and path.stat().st_size < 600_000, "a small float32 checkpoint ships in helpers/data"
    model, losses = load_fact_model(facts_data, seed=seed)
    assert model.config == fact_model_config(facts_data)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert len(losses) == FACT_MODEL["steps"] and losses[-1] < 1.1
    assert answer_accuracy(model, facts_data.ids, facts_data.answer_pos, facts_data.answer_id) == 1.0
    assert not model.training
    assert torch.load(path, weights_only=True)["seed"] == seed


def test_the_retrained_copy_is_seed_0_made_elsewhere(facts_data):
    path = fact_model_path(0, retrained=True)
    assert path.name == "fact_model_seed0_retrained.pt" and path.is_file()
    info, shipped = torch.load(path, weights_only=True), torch.load(fact_model_path(0), weights_only=True)
    assert info["seed"] == 0 and info["made_with"] != shipped["made_with"], "made on another CPU capability"
    retrained, _ = load_fact_model(facts_data, seed=0, retrained=True)
    model, _ = load_fact_model(facts_data, seed=0)
    assert not torch.equal(retrained.blocks[1].ffn.w1.weight, model.blocks[1].ffn.w1.weight)
    assert answer_accuracy(retrained, facts_data.ids, facts_data.answer_pos, facts_data.answer_id) == 1.0


@pytest.mark.parametrize("seed", FACT_MODEL_SEEDS)
def test_shipped_checkpoint_was_trained_from_the_untrained_model(facts_data, seed):
    """The recorded first loss is the untrained model's loss: the checkpoint and untrained_fact_model agree."""
    _, losses = load_fact_model(facts_data, seed=seed)
    untrained = untrained_fact_model(facts_data, seed=seed)
    with torch.no_grad():
        logits = untrained(facts_data.ids)
        first = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                  facts_data.targets.reshape(-1), ignore_index=-100)
    assert first.item() == pytest.approx(losses[0], abs=1e-4)


def test_the_first_training_steps_reproduce_the_recorded_losses(facts_data, monkeypatch):
    """Five steps of the recipe retrace a shipped checkpoint's first five losses (rounding has not diverged yet)."""
    monkeypatch.setitem(FACT_MODEL, "steps", 5)
    _, losses = train_fact_model(facts_data, seed=3, progress=False)
    monkeypatch.undo()
    recorded = torch.load(fact_model_path(3), weights_only=True)["losses"][:5]
    assert losses == pytest.approx(recorded, abs=1e-3)


def test_untrained_fact_model_is_seeded_and_leaves_the_global_generator_alone(facts_data):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b = untrained_fact_model(facts_data, seed=0), untrained_fact_model(facts_data, seed=0)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = untrained_fact_model(facts_data, seed=1)
    assert not torch.equal(a.blocks[0].ffn.w1.weight, c.blocks[0].ffn.w1.weight)


def test_load_fact_model_refuses_another_vocabulary_or_recipe_or_a_missing_file(facts_data, tmp_path, monkeypatch):
    model, losses = load_fact_model(facts_data)
    path = save_fact_model(model, losses, facts_data, tmp_path / "copy.pt", seed=0)
    reloaded, _ = load_fact_model(facts_data, path=path)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
    fewer = make_dataset(load_facts(relations=["capital"]))
    with pytest.raises(ValueError, match="trained on another vocabulary"):
        load_fact_model(fewer, path=path)
    with pytest.raises(FileNotFoundError, match="python -m helpers.fact_model --make-checkpoint --seed 17"):
        load_fact_model(facts_data, seed=17)
    with pytest.raises(FileNotFoundError, match="--seed 17 --retrained"):
        load_fact_model(facts_data, seed=17, retrained=True)
    monkeypatch.setitem(FACT_MODEL, "lr", 0.1)
    with pytest.raises(ValueError, match="was made with"):
        load_fact_model(facts_data, path=path)


def test_the_command_writes_loadable_checkpoints(facts_data, tmp_path, monkeypatch, capsys):
    """`python -m helpers.fact_model --make-checkpoint` on a short run (3 steps) into a temporary folder."""
    monkeypatch.setitem(FACT_MODEL, "steps", 3)
    written = fact_model.main(["--make-checkpoint", "--seed", "0", "2", "--out", str(tmp_path)])
    assert [p.name for p in written] == ["fact_model.pt", "fact_model_seed2.pt"]
    again = fact_model.main(["--make-checkpoint", "--seed", "2", "--retrained", "--out", str(tmp_path)])
    assert again[0].name == "fact_model_seed2_retrained.pt"
    model, losses = load_fact_model(facts_data, path=written[1])
    assert len(losses) == 3 and torch.load(written[1], weights_only=True)["seed"] == 2
    assert "seed 2: loss" in capsys.readouterr().out


def test_the_old_command_still_works():
    """README: `python -m helpers.memory --make-checkpoint` runs the same command line (here: its help)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(fact_model.__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-m", "helpers.memory", "--help"], cwd=root, capture_output=True,
                         text=True, check=True)
    assert "--make-checkpoint" in out.stdout and "--retrained" in out.stdout and not out.stderr
