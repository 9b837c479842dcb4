"""pliner: isolate the ops whose precision makes two configurations of a PyTorch model disagree.

PLiNER (SC20) for PyTorch: the reference (e.g. float32 eager) and a problem configuration (bf16
autocast, TF32 matmuls, torch.compile, CUDA) of the same model on the same inputs disagree; enhance
everything to float64, then bisect coarse to fine — module subtrees, source lines, FX (aten) nodes —
for the smallest set whose enhancement makes them agree, and hand back a mixed-precision recipe.

    from torchhpc.ext.pliner import find
    res = find(model, (x,), reference="fp32", problem="autocast-bf16")
    print(res.report())
    with res.recipe.applied(model), torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
"""

from torchhpc.ext.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "FindOptions": "config", "PlinerTour": "config", "Precision": "config", "SearchOptions": "config",
    "parse_precision": "config", "Oracle": "oracle", "TF32Emulation": "oracle", "divergence": "oracle",
    "precision_context": "oracle", "round_to_tf32": "oracle", "run_config": "oracle",
    "GraphProgram": "program", "ModuleProgram": "program", "Region": "program", "HighPrecision": "recipe",
    "HighPrecisionLines": "recipe", "Recipe": "recipe", "keep_high_precision": "recipe",
    "FindResult": "search", "bisect": "search", "build_program": "search", "ddmin": "search",
    "find": "search",
})
