"""Which file names are photos: one place for the dataset scan and the labels CSV's header sniffing."""

# Photos OpenCV reads (any case): JPEG (also as .jpe/.jfif, and phone "motion photos" with a video appended), PNG,
# BMP, TIFF, WebP.
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".dib", ".tif", ".tiff", ".webp"}
# Photo formats some OpenCV builds cannot decode (HEIC from iPhones, AVIF, ...): a folder's files of these kinds are
# still listed, so one the installed OpenCV cannot read is named as skipped (with what to do) rather than ignored.
OTHER_PHOTO_EXTENSIONS = {".heic", ".heif", ".avif", ".gif", ".jp2", ".jxl"}

# The first bytes of each format above, from the formats' specifications: JPEG's SOI marker + the next marker's
# 0xFF, PNG's 8-byte signature, BMP's "BM", TIFF's byte-order mark + 42, WebP's RIFF….WEBP, GIF87a/89a, the ISO
# base media "ftyp" box of HEIF/AVIF, and the JPEG 2000 / JPEG XL signature boxes (JPEG XL also as a bare codestream).
IMAGE_SIGNATURES = ((0, b"\xff\xd8\xff"), (0, b"\x89PNG\r\n\x1a\n"), (0, b"BM"), (0, b"II*\x00"), (0, b"MM\x00*"),
                    (8, b"WEBP"), (0, b"GIF87a"), (0, b"GIF89a"), (4, b"ftyp"), (0, b"\x00\x00\x00\x0cjP  "),
                    (0, b"\x00\x00\x00\x0cJXL "), (0, b"\xff\x0a"))
SIGNATURE_BYTES = 16


def file_head(path, size: int = SIGNATURE_BYTES) -> bytes:
    """The first `size` bytes of `path` (b'' when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def has_image_signature(path) -> bool:
    """Whether `path` starts like an image of a format above (its bytes, not its name)."""
    head = file_head(path)
    return any(head[offset:offset + len(magic)] == magic for offset, magic in IMAGE_SIGNATURES)


def first_image(paths) -> int | None:
    """The index of the first of `paths` that starts like an image, or None when none does: reads a few bytes per
    file and stops at the first image, so a folder of photos costs one read."""
    return next((i for i, path in enumerate(paths) if has_image_signature(path)), None)
