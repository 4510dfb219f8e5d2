"""Keras 3 on TensorFlow (``plugin``, framework ``keras``), JAX (``on_jax``, ``keras@jax``) and PyTorch
(``on_torch``, ``keras@torch``): one model of a workload (``model``, ``parts``), what the backends share
(``backends``), the doctor probes (``doctor`` on TensorFlow, ``backend_doctor``) and TensorFlow's calibration
probe (``calibration``)."""
