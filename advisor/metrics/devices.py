"""Peak throughput and memory bandwidth of common GPUs, each figure with where it was read.

Dense (no 2:4 sparsity) tensor-core peaks per dtype, in TFLOP/s, and the peak memory
bandwidth in TB/s. Figures were read from the vendor datasheets named in ``source`` or, where
noted, from a page quoting them; a value that no source gave is left out (``None``), so the
report says "unknown" rather than a guess. Vendors print sparse figures next to dense ones;
the dense figure is half the sparse one.

Matching is on the device name Kineto records in ``deviceProperties`` (``NVIDIA H100 80GB
HBM3``, ``Tesla V100-SXM2-32GB``, ...): the first entry whose patterns all occur in the
upper-cased name wins, so more specific entries come first (``H100 PCIe`` before ``H100``,
``A100`` before ``A10``, ``L40S`` before ``L4``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's peaks.

    Attributes:
        name: Display name.
        patterns: Upper-case substrings that must all occur in the recorded device name.
        tflops: Dense peak TFLOP/s by short dtype (``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``).
        mem_tbps: Peak memory bandwidth (TB/s), None when not known.
        source: Where the figures come from.
    """

    name: str
    patterns: tuple[str, ...]
    tflops: dict[str, float] = field(default_factory=dict)
    mem_tbps: float | None = None
    source: str = ""


_NVIDIA = "https://www.nvidia.com/en-us/data-center/"
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "H200 SXM", ("H200",), {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 4.8,
        "NVIDIA H200 Tensor Core GPU datasheet (" + _NVIDIA + "h200/): same Hopper compute as H100 SXM; "
        "141 GB HBM3e at 4.8 TB/s",
    ),
    GpuSpec(
        "H100 PCIe", ("H100", "PCIE"), {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}, 2.0,
        "NVIDIA H100 Tensor Core GPU datasheet (" + _NVIDIA + "h100/): PCIe column, dense = half of the "
        "sparse figures (1,513 FP16/BF16 sparse); 2,000 GB/s",
    ),
    GpuSpec(
        "H100 NVL", ("H100", "NVL"), {"fp32": 60.0, "tf32": 417.5, "bf16": 835.0, "fp16": 835.0}, None,
        "NVIDIA H100 Tensor Core GPU datasheet (" + _NVIDIA + "h100/): NVL column, dense = half of sparse",
    ),
    GpuSpec(
        "H100 SXM", ("H100",), {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 3.35,
        "NVIDIA H100 Tensor Core GPU datasheet (" + _NVIDIA + "h100/): SXM column, dense = half of the "
        "sparse 1,979 FP16/BF16; 3,350 GB/s HBM3 (glennklockwood.com/garden/processors/h100 quotes "
        "the same dense matrix peaks)",
    ),
    GpuSpec(
        "A100 80GB PCIe", ("A100", "80GB", "PCIE"), {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 1.935,
        "NVIDIA A100 Tensor Core GPU datasheet: same compute as SXM; 80 GB HBM2e PCIe at 1,935 GB/s "
        "(as quoted by ai-hpc.github.io, L40S hardware architecture page)",
    ),
    GpuSpec(
        "A100 80GB", ("A100", "80GB"), {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 2.039,
        "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): "
        "19.5 FP32, 156 TF32, 312 BF16/FP16 dense; 80 GB HBM2e SXM at 2,039 GB/s",
    ),
    GpuSpec(
        "A100 40GB", ("A100",), {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 1.555,
        "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): "
        "40 GB HBM2 at 1,555 GB/s",
    ),
    GpuSpec(
        "V100 PCIe", ("V100", "PCIE"), {"fp32": 14.0, "fp16": 112.0}, 0.9,
        "NVIDIA Tesla V100 datasheet: PCIe 14 FP32, 112 tensor FP16; 900 GB/s HBM2",
    ),
    GpuSpec(
        "V100 SXM2", ("V100",), {"fp32": 15.7, "fp16": 125.0}, 0.9,
        "NVIDIA Tesla V100 datasheet / Volta whitepaper: SXM2 15.7 FP32, 125 tensor FP16; 900 GB/s HBM2",
    ),
    GpuSpec(
        "L40S", ("L40S",), {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0}, 0.864,
        "NVIDIA L40S datasheet (" + _NVIDIA + "l40s/): dense figures (sparse: 366 TF32, 733 BF16/FP16, "
        "1,466 FP8); 48 GB GDDR6 at 864 GB/s",
    ),
    GpuSpec(
        "L4", ("L4",), {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}, 0.3,
        "NVIDIA L4 Tensor Core GPU datasheet (" + _NVIDIA + "l4/): dense = half of the sparse 242 FP16 "
        "and 485 FP8; 24 GB GDDR6 at 300 GB/s",
    ),
    GpuSpec(
        "RTX 4090", ("4090",), {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2}, 1.008,
        "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 82.6 FP32; tensor FP16/BF16 "
        "with FP32 accumulate (what training uses) 165.2 dense; 1,008 GB/s GDDR6X (as quoted by "
        "waredb.com/processor/nvidia-geforce-rtx-4090)",
    ),
    GpuSpec(
        "A10", ("A10",), {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, None,
        "NVIDIA A10 Tensor Core GPU datasheet: 31.2 FP32, 62.5 TF32, 125 BF16/FP16 dense",
    ),
    GpuSpec("T4", ("T4",), {"fp32": 8.1, "fp16": 65.0}, None, "NVIDIA T4 Tensor Core GPU datasheet: 8.1 FP32, 65 FP16"),
    # NOTE: the pages we could read disagree on MI300X's dense FP16/BF16 peak (one calls 2,615
    # TFLOPS dense, which is AMD's sparse figure; another gives "~1.3 PFLOPS"); we keep only the
    # figure they agree on. Percent of peak compute is then "unknown" on MI300X.
    GpuSpec(
        "MI300X", ("MI300X",), {}, 5.3,
        "AMD Instinct MI300X: 192 GB HBM3 at 5.3 TB/s (AMD product page, as quoted by "
        "docs.vultr.com/inference-cookbook/rocm and www.codesota.com/hardware/mi300x)",
    ),
)


def find_gpu(device_name: str) -> GpuSpec | None:
    """Return the :class:`GpuSpec` matching a recorded device name, or None."""
    upper = device_name.upper()
    for gpu in GPUS:
        if all(p in upper for p in gpu.patterns):
            return gpu
    return None


def conv_peak_dtype(dtype: str, gpu: GpuSpec | None) -> str:
    """Name the peak a convolution of ``dtype`` runs against: fp32 ones run at TF32's where the GPU has it.

    cuDNN runs float32 convolutions in TF32 unless told not to (``torch.backends.cudnn.allow_tf32``
    is True by default), so against the FP32 peak a conv net's MFU could pass 100%.
    """
    return "tf32" if dtype == "fp32" and gpu is not None and "tf32" in gpu.tflops else dtype


def peak_tflops(device_name: str, dtype: str) -> float | None:
    """Dense peak TFLOP/s of ``device_name`` for ``dtype`` (fp32/tf32/bf16/fp16/fp8), or None."""
    gpu = find_gpu(device_name)
    return gpu.tflops.get(dtype) if gpu else None


def peak_tbps(device_name: str) -> float | None:
    """Peak memory bandwidth (TB/s) of ``device_name``, or None."""
    gpu = find_gpu(device_name)
    return gpu.mem_tbps if gpu else None
