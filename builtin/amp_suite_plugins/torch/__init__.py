"""The PyTorch backend: the plugin (``plugin``), its doctor probe (``doctor``) and its calibration probe (``calibration``)."""
