"""Options objects of evaluate(), evaluate_variant(), compare() and the parallel evaluator (issue 28 item 3): a few
small frozen dataclasses instead of 14–17 parameters.

- `RunOptions` — where and how to run: backend, batch size, parallel processes, TensorRT engines beside the A/B,
  re-run or reuse, progress bars;
- `EvalTarget` — what one evaluation stores: its images, recipe, identity, experiment and store.

Notebook users keep keywords: every function that takes these objects also takes their fields as keywords
(`compare(..., backend="ort", batch_size=64)`), merged into the objects by `with_shortcuts`; a name no object has
is refused with the names there are.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from trtlab.core.errors import UserValueError


@dataclass(frozen=True)
class RunOptions:
    """Where and how to run. `backend`: 'auto' (the torch GPU backend whenever a CUDA GPU is visible, else ONNX
    Runtime on the CPU), 'ort', 'torch'/'gpu' or 'trt'. `batch_size`: images per inference batch, or 'auto' (on a
    CUDA GPU as many as a share of its free memory holds, a power of two up to 256 — backends.gpu.memory —; else
    32). `parallel` and `engines` are compare()'s: `parallel`
    'auto' evaluates in one process per GPU where several are visible; `engines` 'auto' also builds and evaluates
    each variant's TensorRT engine where TensorRT imports (True: always try, False: never). `overlap_decode`
    (compare()): images not decoded yet are decoded in the background while the variants are evaluated (False, or
    TRTLAB_OVERLAP_DECODE=0: everything is decoded first); the stored results are the same either way."""

    backend: str = "auto"
    batch_size: int | str = "auto"
    parallel: object = "auto"
    engines: object = "auto"
    force: bool = False
    progress: bool = True
    runner_options: dict | None = None  # backend-specific runner settings (ONNX Runtime's literal settings, ...)
    checkpoint_every: int = 2048  # logits checkpointed every N images: an interrupted evaluation resumes
    overlap_decode: bool = True


@dataclass(frozen=True)
class EvalTarget:
    """What one evaluation computes and where it is stored: the images (`indices` of the decode cache; None: all),
    the variant's recipe and identity (default: the recipe), the experiment and results store (default: this model
    on these images), and extra run-record fields."""

    indices: object = None
    recipe: dict | None = None
    identity: dict | None = None
    experiment: object = None
    store: object = None
    record_extra: dict | None = field(default=None)


def with_shortcuts(function: str, shortcuts: dict, **objects):
    """`objects` (name → dataclass instance) with the keyword `shortcuts` put into whichever object has that
    field; returned in the order given (one object: that object). A keyword no object has is refused."""
    values = {name: {} for name in objects}
    for key, value in shortcuts.items():
        owner = next((name for name, obj in objects.items() if key in {f.name for f in dataclasses.fields(obj)}),
                     None)
        if owner is None:
            known = sorted({f.name for obj in objects.values() for f in dataclasses.fields(obj)})
            raise UserValueError(f"{function}() takes no option {key!r}",
                                 f"use one of {', '.join(known)} (or pass the options objects "
                                 f"{', '.join(type(o).__name__ for o in objects.values())})")
        values[owner][key] = value
    merged = [dataclasses.replace(obj, **values[name]) if values[name] else obj for name, obj in objects.items()]
    return merged[0] if len(merged) == 1 else tuple(merged)


__all__ = ["EvalTarget", "RunOptions", "with_shortcuts"]
