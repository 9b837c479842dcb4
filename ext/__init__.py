"""torchhpc.ext: one subpackage per system, plus the shared core (`torchhpc.ext.core`)."""
