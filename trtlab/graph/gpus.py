"""The GPUs the speed estimate (trtlab.graph.roofline) knows: datasheet peaks, memory and L2, SMs and clocks, each
with where it comes from. Dense tensor-core peaks (NVIDIA lists L4/A100/H100 tensor figures "with sparsity"; dense is
half of those). Peaks hold at the boost clock: the 70–72 W cards (T4, L4) lower their clock under sustained
tensor-core load (T4: Jia et al., "Dissecting the NVidia Turing T4 GPU via Microbenchmarking", arXiv:1903.07486,
§ on clock throttling), which the estimate's band carries (`sustained_clock`), not its central value.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """One GPU as the estimate sees it."""

    name: str
    fp16_tflops: float  # dense FP16 tensor-core peak
    int8_tops: float  # dense INT8 tensor-core peak
    fp32_tflops: float  # what TensorRT's FP32 layers get: TF32 tensor cores from Ampere on, plain FP32 on Turing
    cuda_core_tflops: float  # FP32 FMA rate of the CUDA cores (depthwise convolutions run there)
    bandwidth_gbs: float  # DRAM
    l2_mb: float
    l2_gbs: float  # L2 bandwidth
    sms: int
    boost_mhz: int
    sustained_clock: float = 1.0  # lowest share of the boost clock the band allows under sustained load


#: L2 bandwidth where no measurement was found (T4, L4): the A100's measured bytes per SM per clock, 7,219 GB/s over
#: 108 SMs at 1,410 MHz = 47 B (Table 3 of "Hardware features of different Nvidia GPU architectures",
#: https://pmc.ncbi.nlm.nih.gov/articles/PMC10448217/table/t0015, which also gives H100's 8,986 GB/s) — assumed.
L2_BYTES_PER_SM_CLOCK = 7219e9 / (108 * 1410e6)


def _l2_gbs(sms: int, mhz: int) -> float:
    return L2_BYTES_PER_SM_CLOCK * sms * mhz * 1e6 / 1e9


GPUS = {
    # T4 (TU104): 65 FP16 TFLOPS, 130 INT8 TOPS (tensor), 8.1 FP32 TFLOPS (no TF32), 320 GB/s GDDR6, 40 SMs, 4 MB L2,
    # boost 1,590 MHz (NVIDIA T4 datasheet; SM count, L2, clock: https://sysrqmts.com/en/gpus/nvidia/tesla/t4).
    # 70 W: the clock drops under sustained tensor load (Jia et al. 2019); how far is not published for TensorRT
    # workloads, so the band reaches down to 60 % of boost (assumed).
    "T4": GPU("T4", 65.0, 130.0, 8.1, 8.1, 320.0, 4.0, _l2_gbs(40, 1590), 40, 1590, 0.6),
    # L4 (AD104): FP16 tensor 242 TFLOPS*, INT8 485 TOPS*, TF32 120 TFLOPS* (*with sparsity), FP32 30.3 TFLOPS,
    # 300 GB/s, 48 MB L2, 58 SMs (7,424 CUDA cores ÷ 128), boost 2,040 MHz, 72 W (NVIDIA L4 datasheet;
    # https://fpsbench.com/compare/gpu/nvidia-l4-vs-nvidia-tesla-m40 for L2 and clocks); band down to 70 % of boost
    # (assumed, as for the T4).
    "L4": GPU("L4", 121.0, 242.5, 60.0, 30.3, 300.0, 48.0, _l2_gbs(58, 2040), 58, 2040, 0.7),
    # A100 SXM4 40 GB: FP16 tensor 312 TFLOPS, INT8 624 TOPS, TF32 156 TFLOPS (dense), FP32 19.5 TFLOPS,
    # 1,555 GB/s HBM2, 108 SMs, 40 MB L2 (7,219 GB/s, PMC table above), 1,410 MHz (A100 datasheet / whitepaper).
    "A100": GPU("A100", 312.0, 624.0, 156.0, 19.5, 1555.0, 40.0, 7219.0, 108, 1410),
    # H100 SXM5: FP16 tensor 1,979 TFLOPS*, INT8 3,958 TOPS*, TF32 989 TFLOPS* (*sparsity), FP32 67 TFLOPS,
    # 3.35 TB/s HBM3, 132 SMs, 50 MB L2 (8,986 GB/s, PMC table above), boost 1,980 MHz (H100 datasheet;
    # https://chipsandcheese.com/2023/07/02/nvidias-h100-funny-l2-and-tons-of-bandwidth/ for SMs and L2).
    "H100": GPU("H100", 989.4, 1979.0, 494.7, 67.0, 3350.0, 50.0, 8986.0, 132, 1980),
}
