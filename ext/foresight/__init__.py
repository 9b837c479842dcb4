"""foresight — choose how hard to compress simulation output by what compression does to the analyses
you run (power spectra, halo mass functions, turbulence statistics), not just the pointwise error.

Library::

    from torchhpc.ext.foresight import compress, decompress, power_spectrum, spectrum_ratio_check

    c = compress(field, "ours", mode="rel", bound=1e-3)      # or "sz3", "zfp", "fpzip", "bitgroom", ...
    restored = decompress(c)
    chk = spectrum_ratio_check(power_spectrum(field), power_spectrum(restored), tolerance=0.01)

Sweeps: :class:`~.config.SweepConfig` + :func:`~.sweep.run_sweep` (``torchhpc foresight run``).
"""

from torchhpc.ext.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "energy_spectrum": "analyses", "fof_halos": "analyses", "halo_mass_function": "analyses",
    "halo_mass_function_check": "analyses", "power_spectrum": "analyses",
    "spectrum_ratio_check": "analyses", "turbulence_check": "analyses",
    "velocity_gradient_stats": "analyses", "COMPRESSORS": "compressors", "Compressed": "compressors",
    "compress": "compressors", "decompress": "compressors", "get_compressor": "compressors",
    "gaussian_random_field": "data", "kolmogorov_velocity": "data", "load_fields": "data",
    "read_genericio": "data", "max_abs_error": "metrics", "max_rel_error": "metrics", "mse": "metrics",
    "psnr": "metrics", "psnr_peak": "metrics", "ssim": "metrics",
})
