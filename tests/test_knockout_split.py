"""helpers.knockout_split: the split of section 6's own and other sets, shipped for ten seeds."""
import torch

from helpers import knockout_runs, knockout_split
from helpers.interventions import removed_write

SITES = ["L0 subject", "L0 last word", "L1 last word"]


def test_the_shipped_file_holds_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = knockout_split.load()
    assert sorted(shipped) == list(range(10))
    made = knockout_split.make([0], tmp_path / "split.json")["runs"]["0"]
    assert knockout_runs.max_difference(made, shipped[0]) < 1e-5


def test_the_overlap_is_the_knockout_files_shared_share():
    split, ko = knockout_split.load(), knockout_runs.load()
    assert all(abs(split[s][site]["overlap"] - ko[s]["shared"][site]) < 1e-4 for s in split for site in SITES)


def test_split_sets_partition_own_and_match_the_shared_part_on_length():
    g = torch.Generator().manual_seed(0)
    activity = torch.randn(30, 24, generator=g).relu() + 0.01 * torch.randn(30, 24, generator=g)
    values = torch.randn(24, 8, generator=g)
    donor = torch.arange(30).roll(1)
    sets, ok = knockout_split.split_sets(activity, donor, values, n_off=8)
    assert torch.equal(sets["own only"] + sets["own"] * sets["other"], sets["own"])
    assert torch.equal(sets["other only"] * sets["own"], torch.zeros(30, 24))
    shared = sets["own"] * sets["other"]
    assert not ((sets["shared size-matched"] > 0) & (shared == 0))[ok].any()      # kept rows use shared neurons only
    gap = removed_write(activity, sets["shared size-matched"], values) - removed_write(activity, sets["own only"], values)
    assert gap[ok].abs().max() < 1e-3


def test_the_family_and_report_read_every_site():
    runs = knockout_split.load()
    family = knockout_split.family(runs, SITES, range(10))
    assert list(family) == [f"{site}: own only − shared" for site in SITES]
    assert all(c.mean > 0 for c in family.values())                  # the specific neurons do slightly more
    assert len(knockout_split.report(runs, SITES, range(10)).splitlines()) == 1 + len(SITES)
