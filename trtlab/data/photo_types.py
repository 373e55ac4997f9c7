"""Which file names are photos: one place for the dataset scan and the labels CSV's header sniffing."""

# Photos OpenCV reads (any case): JPEG (also as .jpe/.jfif, and phone "motion photos" with a video appended), PNG,
# BMP, TIFF, WebP.
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".dib", ".tif", ".tiff", ".webp"}
# Photo formats some OpenCV builds cannot decode (HEIC from iPhones, AVIF, ...): a folder's files of these kinds are
# still listed, so one the installed OpenCV cannot read is named as skipped (with what to do) rather than ignored.
OTHER_PHOTO_EXTENSIONS = {".heic", ".heif", ".avif", ".gif", ".jp2", ".jxl"}
