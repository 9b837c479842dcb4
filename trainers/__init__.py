"""torchhpc.trainers: runnable jobs (``python -m`` / ``torchrun -m``) and the ``torchhpc`` CLI."""
