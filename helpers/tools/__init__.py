"""Tools a learner never imports: benchmarks and figure regeneration.

``python -m helpers.tools.benchmark``      FFN vs matmul speed, activation memory (and the MoE timings)
``python -m helpers.tools.benchmark_moe``  the MoE layer against the dense FFN, the readable loop and Mixtral
``python -m helpers.tools.figures``        redraws every image in ``figures/``
"""
