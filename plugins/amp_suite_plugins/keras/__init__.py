"""The Keras (TensorFlow) backend: the plugin (``plugin``) and its model parts (``parts``), its doctor probe (``doctor``) and its calibration probe (``calibration``)."""
