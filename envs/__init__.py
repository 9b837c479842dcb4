"""torchhpc.envs: Gymnasium environments (registered under the ``torchhpc/`` namespace)."""
