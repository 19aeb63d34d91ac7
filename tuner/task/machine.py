"""Constants of the hypothetical tensor accelerator (H100-like ratios, 16 cores). Units: cycles, bytes."""

from __future__ import annotations

CORES = 16
TC_MACS_PER_CLK = 2048          # bf16 MAC/clk/core with all 4 sub-cores fed
TC_FEED_WARPS = 4               # math warps needed to feed every sub-core
SFU_EXP_PER_CLK = 16            # exp/clk/core
FMA_OPS_PER_CLK = 128           # fp32 op/clk/core
SCRATCHPAD_KB = 192             # per core
SMEM_BYTES_PER_CLK = 128        # 32 banks x 4 B
REGISTERS_PER_CORE = 65536
MAX_REGS_PER_THREAD = 255
MAX_WARPS_PER_CORE = 64
MAX_CTAS_PER_CORE = 4
DRAM_BYTES_PER_CLK = 224
L2_BYTES_PER_CLK = 4 * DRAM_BYTES_PER_CLK
L2_HIT_ON_REREAD = 0.8
DRAM_EFFICIENCY = {64: 0.75, 128: 0.88, 256: 1.0}   # achieved share of peak by burst size (row locality)
DMA_BYTES_PER_CLK = 64          # per core
DMA_ISSUE_CLK_PER_BURST = 0.5
DRAM_LATENCY = 600
L2_LATENCY = 250
LATENCY = L2_HIT_ON_REREAD * L2_LATENCY + (1 - L2_HIT_ON_REREAD) * DRAM_LATENCY
LAUNCH = 2000
BYTES_BF16 = 2
BYTES_FP32 = 4
