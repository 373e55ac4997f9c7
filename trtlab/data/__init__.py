"""Images in: datasets, labels, preprocessing, the decode cache, batches, splits, demo assets, ImageNet."""
