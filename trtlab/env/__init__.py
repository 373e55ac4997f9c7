"""TensorRT environment discovery, repair and loading (standard library only; imports trtlab.core only)."""
