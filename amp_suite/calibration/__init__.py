"""The hardware ceiling: each plugin's calibration probe run and cached (ceiling), and the timing and sizes every probe shares (kit)."""
