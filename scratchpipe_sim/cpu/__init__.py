"""The CPU half, measured: compiled micro-benchmarks (`calibrate --cpu`) and the trace-driven
CPU stages (`validate --cpu`) that check the timing model's CPU costs on this machine."""
