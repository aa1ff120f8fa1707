

def test_the_shipped_phase_diagram_reproduces_its_dense_row_and_reads_as_elhage_et_al():
    from helpers.superposition import PHASE_IMPORTANCES, load_phase, phase_diagram
    phase = load_phase()
    assert phase["importances"] == list(PHASE_IMPORTANCES) and phase["made_by"].endswith("--phase")
    dense = phase_diagram(PHASE_IMPORTANCES, [1.0])[0].tolist()
    assert dense == phase["codes"][-1]
    # dense: the more important feature takes the dimension; sparse: they share it
    assert dense[0] == 0 and dense[-1] == 2 and set(phase["codes"][0]) == {1}
