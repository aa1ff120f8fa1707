"""Helpers for the transformer feed-forward network (FFN) course.

One small module per idea, imported explicitly by the notebooks, e.g.
``from helpers.ffn import FFN``. Nothing but ``logging`` is imported here, so
``import helpers`` stays instant and no module pulls in a later idea.

The package has three parts:

* the course library (this folder): what the notebooks teach with, one module per idea;
* ``helpers/exercises/``: the exercise machinery (``engine`` checks, ``nbNN`` holds notebook NN's checkers,
  ``grader`` backs ``python -m helpers.grade``);
* ``helpers/tools/``: what a learner never imports (``python -m helpers.tools.benchmark``,
  ``python -m helpers.tools.benchmark_moe``, ``python -m helpers.tools.figures``).

The course library
------------------
env         setup for a notebook: seeds, device, Colab bootstrap, version line
validate    argument checks with clear error messages
stats       verdicts over seeds: paired and Welch t, Holm's step-down over a family
activations ReLU, squared ReLU, GELU (exact and tanh), SiLU/Swish, sigmoid, by name
dead_units  dead and silent hidden units: notebook 01's data, SGD, stuck shares, firing rates, stable lr
ffn         the FFN (dense and gated by configuration), widths, parameter counts
residual    a deep stack of FFNs: residuals, LayerNorm placement, per-layer statistics
width       what a wider hidden layer buys: memorising random facts
neuron_basis the key-value reading of a trained FFN tested against a random basis of its hidden space
precision   how far two computations agree, printed as a bound that reads the same on every CPU
costs       FLOPs, saved activations, bytes and operation counts: formulas and measurements
transformer a tiny decoder-only transformer and its training loop
facts       the course's fact table and its tokenised data set
fact_model  notebook 03's trained fact models (ten seeds and a retrain, shipped) and the command that makes them
memory      an FFN read as a key-value memory: triggers, values, agreement against mismatched pairs
interventions sub-updates, knock-outs with their controls, activation patching, each sublayer's direct share of an answer's lead
neuron_patterns how many neurons share a relation's pattern, against random sets and the untrained twin
explorer    notebook 03's neuron explorer
editing     ROME-style rank-one edits of an FFN's value matrix
edit_budget a ROME edit's budget against efficacy and specificity, and the edits at both sites (notebook 03; shipped runs and their commands)
knockout_runs notebook 03's knock-out family on every fact, ten seeds (shipped runs and their command)
attention_knockout one attention edge removed (the last word's view of the subject), Geva et al. 2023 (notebook 03)
knockout_split notebook 03's own and other sets split: what "other" is made of, specific vs shared (shipped)
knockout_attribution notebook 03's attribution-ranked sets (gradient × activation) beside the activation-ranked ones (shipped)
neuron_census notebook 03's single-neuron knock-outs on every fact, ten seeds (shipped)
promotion_runs notebook 03's promotion grid: layer 1's push on the answer and its rivals, 25 seeds (shipped)
gate_plane  one gated unit over the plane of its two inputs (notebook 04's picture)
gating      gated variants compared: gate gradients, saved activations, matched-parameter training
gate_product notebook 04, section 6.3: gated FFNs against dense ones at the same parameters (32 units) and the same units (21), on product, gate and control targets (shipped, with a 3,000-step check of the verdicts read)
race_readout notebook 04's race verdict lines and gap-figure rows; full_readout() prints every check (family, sweep, stalls, kernels)
moe         mixture of experts: routers, capacity, balance and z losses, dispatch; shared and fine-grained
            experts, bias balancing, sigmoid scores, noisy top-k (by configuration)
moe_configs today's MoE configurations as published; DeepSeekMoE's fine-grained and shared experts counted
fact_lookup a fact lookup whose only varied part is its FFN (embeddings frozen: the FFN must hold the facts)
moe_race    notebook 07's race: dense vs MoE per step, each arm at its tuned learning rate (race shipped)
moe_long_run notebook 07's long run: the MoEs and their dense twins trained 3,000 steps (shipped)
moe_audit   notebook 07's race read in short: one verdict line, the lead-shrinks test, the folded audit
moe_step_time notebook 07's time per step from counts and a datasheet (roofline, all-to-all)
moe_granularity notebook 07's fine-grained vs coarse experts with a cheap router (shipped)
routing_plots routing histograms and heat maps, and the analyses behind notebook 05's figures
router_skew why a fresh router is uneven on real text: the inputs' geometry and its controls
moe_runs    notebook 05's training runs: an MoE LM beside dense baselines, over seeds and learning rates (shipped)
moe_capacity_cost what a capacity factor costs a trained MoE LM in fit, against dropless (shipped)
mixtral_pooled Hugging Face's pooled Mixtral balance loss, written out (tested against transformers)
moe_expert_count notebook 05's expert-count sweep: E = 1-16 top-1 experts with the same expert work per fact, the dense line at each E's active parameters, and E = 8 against both dense lines at 300 steps (shipped)
moe_zloss   notebook 05's z-loss study: the MoE LM trained with and without the router z-loss (shipped)
moe_no_ffn  notebook 05's control: the same LM with no FFN at all, 15 steps (shipped)
moe_collapse notebook 05's collapse and recovery: the balancing loss switched on mid-run in a pushed MoE LM (shipped)
moe_lesson  notebook 05's one-line verdicts, live-rerun line, fit controls and routing purity (shipped)
chunking    sequence chunking, with and without activation checkpointing
distributed the one process launcher and differentiable collectives (all-to-all, all-reduce)
expert_parallel an MoE split over processes with torch.distributed (gloo on CPU)
tensor_parallel the FFN split Megatron's way (columns of W1, rows of W2) over processes
fully_sharded the FFN's weights sharded over processes (ZeRO-3/FSDP): all-gather, reduce-scatter
inference   arithmetic intensity on published hardware, decode vs prefill, an MoE's bytes per step, Mixtral's count
real_code   transformers' own FFN and MoE modules (GPT-2 … gpt-oss) from tiny configurations, with the course's weights
superposition the toy model of superposition (n sparse features through m < n dimensions), with per-feature dimensionality
toy_runs    notebook 09's toy models of superposition and their dictionaries, seeds 0-4 (shipped)
neuron_toy  notebook 09's "ReLU hidden layer" toy: polysemantic neurons and a dictionary on them, at three sparsities (shipped)
dictionary  sparse dictionaries (TopK transcoders) on an FFN: training, reconstruction, sparsity, features vs neurons
dictionary_study notebook 09's dictionaries on five fact models: the superposition test and its controls (shipped)
dead_features notebook 09's dead dictionary features and two remedies: AuxK at two coefficients and Exercise 8's
            resampling on five fact models (shipped)
used_counts notebook 09's Exercise 5: features used on y, its Gaussian and the slot mixture, per rate and run length (shipped)
tracking_starts notebook 09's section 6 control: the untrained data start and random-start transcoders (shipped)
neuron_dictionary notebook 09's section 6.1: a random-start dictionary on the fact model's neurons against the neurons, and whether its features recur across seeds (shipped)
planted_count notebook 09's section 6.1: its count on planted directions with and without superposition (shipped)
feature_match notebook 09's quick check 2: another seed's transcoder features, matched by value (shipped)
folded      notebook 09's printed tables: one in view, the rest in an HTML <details> block (text/plain keeps all)
feature_reading  notebook 09's featured feature (the top-list rule) and its two-panel figure
activation_sparsity silent neurons per token, skipping them (exact, threshold, predicted), batch unions, weights read
plotting    the course's figure style and shared plots
progress    progress bars that a saved notebook shows finished
"""

__version__ = "0.1.0"

import logging as _logging

#: Library loggers whose import-time messages are not part of any lesson. Silenced here, once, for every
#: notebook and script that imports ``helpers`` (before torch is imported): e.g. torch's CUDA builds log
#: "No CUDA runtime is found, using CUDA_HOME=..." from ``torch.utils.cpp_extension`` on a machine without a
#: GPU when ``torch.utils.benchmark`` is imported. Errors still get through.
QUIET_LOGGERS = ("torch.utils.cpp_extension",)

for _name in QUIET_LOGGERS:
    _logging.getLogger(_name).setLevel(_logging.ERROR)
