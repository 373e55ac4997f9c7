"""The ONNX classifier: inspection, sanitizing, guards and the one FP16/mixed-precision converter."""
