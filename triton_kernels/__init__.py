"""torchhpc.triton_kernels: @triton.jit kernels and their launchers, one module per system.

Importing a module here imports triton; the ops in ``torchhpc.ext`` import them lazily
and fall back to their torch twins where triton or CUDA is missing.
"""
