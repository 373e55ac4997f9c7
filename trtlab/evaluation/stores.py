"""Finding and opening result stores: which stores a workspace holds, the one a reader means, and which of its
variants to show. Dashboards, reports and the CLI read results through these (nothing here runs inference)."""
from __future__ import annotations

import os
from pathlib import Path

from trtlab.core.errors import UserFileNotFound
from trtlab.core.workspace import workspace_dir
from trtlab.evaluation.results import ResultsStore, VariantResult


def find_result_stores(workspace=None, legacy: bool = False) -> list[Path]:
    """Result-store folders under `<workspace>/results`, most recently updated first (with `legacy=True`, the
    stores written by trtlab 0.1 without experiment identity, which are refused)."""
    root = workspace_dir(workspace) / "results"
    if not root.is_dir():
        return []
    stores = [p for p in root.iterdir()
              if p.is_dir() and ResultsStore(p).variants() and ResultsStore(p).is_legacy() == legacy]
    return sorted(stores, key=lambda p: max(f.stat().st_mtime for f in p.glob("*.json")), reverse=True)


def open_store(store=None, workspace=None) -> ResultsStore:
    """A ResultsStore from a store, a folder, or (None) the most recently updated store in the workspace."""
    if isinstance(store, ResultsStore):
        store.check_identity()
        return store
    if store is not None:
        folder = Path(store)
        if not folder.is_dir():
            raise UserFileNotFound(f"results folder {folder} does not exist", "pass a folder under "
                                   "<workspace>/results (python -m trtlab dashboard --list shows them)")
        opened = ResultsStore(folder)
        opened.check_identity()
        return opened
    stores = find_result_stores(workspace)
    if not stores:
        legacy = find_result_stores(workspace, legacy=True)
        if legacy:
            ResultsStore(legacy[0]).check_identity()  # raises: says why and how to rebuild
        raise UserFileNotFound(f"no stored results under {workspace_dir(workspace) / 'results'}", "evaluate a "
                               "model first (python -m trtlab demo or calibrate, or trtlab.evaluate(...))")
    return ResultsStore(stores[0])


def load_results(stores, workspace=None) -> tuple[ResultsStore, dict[str, VariantResult]]:
    """(first store, every stored result) of one or several stores — which must hold one experiment: results of
    different models or evaluation sets are refused (identity.MixedExperimentError names both)."""
    from trtlab.evaluation.identity import check_one_experiment

    stores = [stores] if isinstance(stores, (ResultsStore, str, os.PathLike)) or stores is None else list(stores)
    opened = [open_store(s, workspace) for s in stores]
    results: dict[str, VariantResult] = {}
    for store in opened:
        for name, result in store.load_all().items():
            results[name if name not in results else f"{name}~{store.folder.name[-6:]}"] = result
    check_one_experiment(results)
    return opened[0], results


def sibling_stores(store: ResultsStore) -> list[Path]:
    """The other result stores in the workspace `store` lives in (none when it is not under a `results` folder)."""
    if store.folder.parent.name != "results":
        return []
    return [p for p in find_result_stores(store.folder.parent.parent) if p != store.folder]


def resolve_selection(available, chosen=None, reference=None) -> tuple[list[str], str]:
    """(variants to show, reference) from what is stored and what the user picked: the reference defaults to
    fp32 (else the first stored variant) and is always shown, first."""
    available = list(available)
    if not available:
        raise ValueError("no stored variants to show; evaluate at least one variant first")
    chosen = list(chosen or available)
    unknown = [name for name in [*chosen, *([reference] if reference else [])] if name not in available]
    if unknown:
        raise KeyError(f"variant(s) {', '.join(map(repr, unknown))} not stored (stored: {', '.join(available)}); "
                       f"evaluate them first or pick from the stored ones")
    reference = reference or ("fp32" if "fp32" in chosen else chosen[0])
    return [reference] + [name for name in chosen if name != reference], reference


def fp16_variant(results: dict[str, VariantResult]) -> str | None:
    """The FP16 variant among `results`: the one named fp16, else the first whose recipe says precision fp16."""
    if "fp16" in results:
        return "fp16"
    return next((name for name, r in results.items() if (r.record.get("recipe") or {}).get("precision") == "fp16"),
                None)
