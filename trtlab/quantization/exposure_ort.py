"""The calibration's exposed tensors out of ONNX Runtime on the CPU, without its reorder copies.

ONNX Runtime's CPU provider runs convolutions in a blocked layout (NCHWc: channels in blocks of b = 8 with AVX2,
16 with AVX-512, padded up to a multiple of b) and converts a tensor back to NCHW (a ReorderOutput node) wherever
it leaves the graph. Exposing the 60 tensors of EfficientNet-Lite0 that way costs 0.5–0.9× a forward pass (measured,
bench/bench_counting.py), more than counting them. A histogram does not care where a value sits, so the tensors are
taken before that copy: ONNX Runtime writes the graph it optimized for this machine (optimized_model_filepath),
the ReorderOutput nodes that only feed exposed outputs are removed, the blocked tensors become the outputs, and that
graph runs as it is (no further optimization). Each blocked output holds every value of its tensor once, plus the
padded channels of the last block, which ONNX Runtime computes from zero weights: those are checked to be zeros in
every sub-batch and left out of bin 0 (TensorHistogram.update's `padding_zeros`); where they are not zeros, the
tensor is copied back to NCHW in numpy for that sub-batch and counted exactly.

Nothing here trusts ONNX Runtime's internals blindly: on the first image the ordinary exposed graph runs too,
and the block size b is the one with which every blocked output, put back into NCHW, equals ONNX Runtime's own NCHW
output value for value. Where no single b does, or where the optimized graph cannot be written or read, the
ordinary exposed graph counts every sub-batch, and the log says why.
"""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

BLOCK_SIZES = (8, 16, 4, 32, 64)  # MLAS's NCHWc block sizes (AVX2, AVX-512, NEON), and room for wider ones
_DOMAIN = "com.microsoft.nchwc"


@dataclass(frozen=True)
class Blocked:
    """An exposed tensor read in ONNX Runtime's blocked layout: `channels` real channels, the output holding them
    in blocks of `block` (the last block padded)."""

    channels: int
    block: int = 0  # 0 until the first sub-batch has settled it


def padding_view(values: np.ndarray, layout: Blocked) -> np.ndarray | None:
    """The padded channel lanes of a blocked N×Cpad×H×W output (None where Cpad = channels: nothing padded)."""
    n, padded = values.shape[:2]
    if padded == layout.channels:
        return None
    blocks = values.reshape(n, padded // layout.block, -1, layout.block)
    return blocks[:, -1, :, layout.channels % layout.block:]


def to_nchw(values: np.ndarray, layout: Blocked, block: int | None = None) -> np.ndarray:
    """A blocked N×Cpad×H×W output as the N×C×H×W tensor it stands for (a copy)."""
    b = block or layout.block
    n, padded = values.shape[:2]
    spatial = values.shape[2:]
    blocks = values.reshape((n, padded // b) + spatial + (b,))
    order = (0, 1, blocks.ndim - 1) + tuple(range(2, blocks.ndim - 1))
    return np.ascontiguousarray(blocks.transpose(order).reshape((n, padded) + spatial)[:, :layout.channels])


class ExposedRunner:
    """One ONNX Runtime run of a sub-batch: `(batch, [(values, padding zeros)] in requested order)`, only the real
    rows (batch.count) of each output kept."""

    def __init__(self, model, input_name: str, requested: list[str], threads: int | None, fixed_batch: int = 0):
        from trtlab.core.ort_session import ort_session
        from trtlab.graph.onnx_utils import with_outputs

        self.input_name, self.requested, self.fixed_batch = input_name, requested, fixed_batch
        self.layouts: dict[str, Blocked] = {}
        self.blocked_session, self.fetch = None, requested
        exposed = with_outputs(model, requested)
        with tempfile.TemporaryDirectory(prefix="trtlab-ort-") as folder:
            optimized = os.path.join(folder, "optimized.onnx")
            try:
                self.plain = ort_session(exposed, threads=threads, spinning=False, optimized_model_path=optimized)
            except Exception as error:  # noqa: BLE001 - e.g. no room for the optimized graph (a model over 2 GB)
                self.plain = ort_session(exposed, threads=threads, spinning=False)  # a real error raises here
                self._give_up(f"the optimized graph could not be written ({type(error).__name__}: {error})")
                return
            try:
                self._open_blocked(optimized, threads)
            except Exception as error:  # noqa: BLE001 - any failure here only means "use the plain graph"
                self._give_up(f"{type(error).__name__}: {error}")

    def _open_blocked(self, optimized: str, threads: int | None) -> None:
        import onnx

        from trtlab.core.ort_session import ort_session

        graph = onnx.load(optimized)
        producer = {out: node for node in graph.graph.node for out in node.output}
        consumed = {name for node in graph.graph.node for name in node.input}
        wanted = set(self.requested)
        reorders = {}
        for output in graph.graph.output:
            node = producer.get(output.name)
            if (output.name in wanted and node is not None and node.op_type == "ReorderOutput"
                    and node.domain == _DOMAIN and output.name not in consumed):
                attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                if not attributes.get("channels_last", 0) and attributes.get("channels"):
                    reorders[output.name] = (node, int(attributes["channels"]))
        if not reorders:
            return
        dropped = {id(node) for node, _ in reorders.values()}
        kept = [node for node in graph.graph.node if id(node) not in dropped]
        del graph.graph.node[:]
        graph.graph.node.extend(kept)
        fetch = [reorders[name][0].input[0] if name in reorders else name for name in self.requested]
        outputs = [o for o in graph.graph.output if o.name not in reorders]
        del graph.graph.output[:]
        graph.graph.output.extend(outputs)
        present = {o.name for o in outputs}
        graph.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in fetch
                                  if name not in present)
        self.blocked_session = ort_session(graph, optimization="disable", threads=threads, spinning=False)
        self.fetch = fetch
        self.layouts = {name: Blocked(channels) for name, (_, channels) in reorders.items()}

    def _give_up(self, why: str) -> None:
        log.info("calibration exposes its tensors through ONNX Runtime's NCHW outputs (the reorder copies stay): %s",
                 why)
        self.blocked_session, self.fetch, self.layouts = None, self.requested, {}

    def __call__(self, batch):
        if not self.requested:
            return batch, []
        if self.blocked_session is not None and not all(layout.block for layout in self.layouts.values()):
            rows = len(batch.images) if self.fixed_batch else 1  # one image settles it, where the batch may vary
            self._settle_block({self.input_name: batch.images[:rows]})
        feed = {self.input_name: batch.images}
        if self.blocked_session is None:
            return batch, [(o[:batch.count], 0) for o in self.plain.run(self.requested, feed)]
        outputs = self.blocked_session.run(self.fetch, feed)
        return batch, [self._countable(name, o[:batch.count]) for name, o in zip(self.requested, outputs)]

    def _settle_block(self, feed: dict) -> None:
        """The block size with which every blocked output equals ONNX Runtime's own NCHW output (the first sub-batch's
        first image, or the whole sub-batch of a fixed-batch model)."""
        reference = dict(zip(self.requested, self.plain.run(self.requested, feed)))
        found = dict(zip(self.requested, self.blocked_session.run(self.fetch, feed)))
        fitting = []
        for block in BLOCK_SIZES:
            fits = True
            for name, layout in self.layouts.items():
                blocked, expected = found[name], reference[name]
                padded = blocked.shape[1] if blocked.ndim >= 3 else 0
                if (padded % block or not 0 <= padded - layout.channels < block
                        or not np.array_equal(to_nchw(blocked, layout, block), expected)):
                    fits = False
                    break
            if fits:
                fitting.append(block)
        if len(fitting) != 1:
            self._give_up("no single NCHWc block size reproduces ONNX Runtime's NCHW outputs"
                          if not fitting else f"the block size is ambiguous ({fitting})")
            return
        self.layouts = {name: Blocked(layout.channels, fitting[0]) for name, layout in self.layouts.items()}
        self.plain = None  # settled: its memory goes back
        log.info("calibration reads %d of %d exposed tensors in ONNX Runtime's blocked layout (NCHW%dc), checked "
                 "against its NCHW outputs on the first image: no reorder copies", len(self.layouts),
                 len(self.requested), fitting[0])

    def describe(self) -> str:
        """How the tensors left ONNX Runtime (for the statistics' `counting` note and the log)."""
        blocks = {layout.block for layout in self.layouts.values() if layout.block}
        if self.blocked_session is None or not blocks:
            return "ONNX Runtime"
        return f"ONNX Runtime, {len(self.layouts)} tensors read as NCHW{blocks.pop()}c"

    def _countable(self, name: str, values: np.ndarray) -> tuple[np.ndarray, int]:
        layout = self.layouts.get(name)
        if layout is None:
            return values, 0
        padding = padding_view(values, layout)
        if padding is None:
            return values, 0
        if np.any(padding):  # not the zeros ONNX Runtime computes from zero weights: count the real values alone
            return to_nchw(values, layout), 0
        return values, padding.size


__all__ = ["BLOCK_SIZES", "Blocked", "ExposedRunner", "padding_view", "to_nchw"]
