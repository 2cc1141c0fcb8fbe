"""Peak DRAM bandwidth and FLOP rates of known GPUs, for a roofline when the report does not carry them.

An ncu raw page with the roofline metrics gives the peaks itself (drivers/ncu/reader.py); this table fills what it
lacks (tensor-core peaks are not in the full set's raw page; a `--set basic` report has no peak at all), looked
up by the device name the report or NVML gives. Figures are NVIDIA's datasheet numbers, dense (no sparsity),
boost clocks:
- H100 SXM / PCIe / NVL: https://www.nvidia.com/en-us/data-center/h100/ (datasheet table: FP32 67 / 51 / 60 TF,
  FP16 Tensor Core 1,979 / 1,513 / 1,671 TF with sparsity, i.e. half that dense; GPU memory bandwidth 3.35 / 2 /
  3.9 TB/s)
- H200 SXM / NVL: https://www.nvidia.com/en-us/data-center/h200/ (FP32 67 / 60 TF; FP16 Tensor 1,979 / 1,671 TF
  sparse; 4.8 TB/s)
- A100: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
  (FP32 19.5 TF; FP16 Tensor 312 TF dense; 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s, 40GB 1,555 GB/s)
- L4: https://www.nvidia.com/en-us/data-center/l4/ (FP32 30.3 TF; FP16 Tensor 242 TF sparse; 300 GB/s)
- V100: https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
  (SXM2: FP32 15.7 TF, Tensor 125 TF; PCIe: 14 / 112 TF; 900 GB/s)
- T4: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
  (FP32 8.1 TF; FP16 Tensor 65 TF; 320 GB/s)
"""

from __future__ import annotations

import re

T, G = 1e12, 1e9
# (pattern on the device name, what the table calls it, peak DRAM bytes/s, peak FP32 FLOP/s, peak dense FP16
# tensor FLOP/s); the first match wins, so variants come before the plain name.
KNOWN_GPUS = (
    (r"H100.*NVL", "H100 NVL", 3.9 * T, 60 * T, 1671 / 2 * T),
    (r"H100.*PCIe", "H100 PCIe", 2.0 * T, 51 * T, 1513 / 2 * T),
    (r"H100", "H100 SXM", 3.35 * T, 67 * T, 1979 / 2 * T),
    (r"H200.*NVL", "H200 NVL", 4.8 * T, 60 * T, 1671 / 2 * T),
    (r"H200", "H200 SXM", 4.8 * T, 67 * T, 1979 / 2 * T),
    (r"A100.*80GB.*PCIe|A100.*PCIe.*80GB", "A100 80GB PCIe", 1935 * G, 19.5 * T, 312 * T),
    (r"A100.*80GB", "A100 80GB SXM", 2039 * G, 19.5 * T, 312 * T),
    (r"A100", "A100 40GB", 1555 * G, 19.5 * T, 312 * T),
    (r"\bL4\b", "L4", 300 * G, 30.3 * T, 242 / 2 * T),
    (r"V100.*PCI", "V100 PCIe", 900 * G, 14 * T, 112 * T),
    (r"V100", "V100 SXM2", 900 * G, 15.7 * T, 125 * T),
    (r"\bT4\b", "T4", 320 * G, 8.1 * T, 65 * T),
)


def known_peaks(device_name: str | None) -> dict | None:
    """{"table_name", "peak_dram_bytes_per_s", "peak_fp32_flop_per_s", "peak_tensor_flop_per_s"} or None."""
    if not device_name:
        return None
    for pattern, name, dram, fp32, tensor in KNOWN_GPUS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return {
                "table_name": name,
                "peak_dram_bytes_per_s": dram,
                "peak_fp32_flop_per_s": fp32,
                "peak_tensor_flop_per_s": tensor,
            }
    return None
