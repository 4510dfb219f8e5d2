"""Number formats and what a format does to a tensor's values: the arithmetic of the numerics report.

``formats`` rounds float64 values to a narrower floating-point format in NumPy
(float16, bfloat16, the two FP8 formats); ``shares`` counts what that
rounding loses (underflow to zero, subnormals, overflow) and how far a tensor
is from its float32 or float64 shadow.  Pure NumPy: no framework is imported.
"""
