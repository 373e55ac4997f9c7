"""TensorRT 10.x / 11.x: engine build, legacy 10.x options, calibrator, runner, inspection."""
