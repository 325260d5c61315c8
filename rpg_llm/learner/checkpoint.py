"""Whether a PPO checkpoint file (``trainer.pt``) is whole, told without torch.

``torch.save`` writes a zip archive; a file cut short, overwritten or filled with other bytes
fails to open as one or fails a member's CRC. :func:`check_checkpoint_file` reads it once (about
0.1 s per 100 MB) so that a resume or a probe can name a damaged checkpoint before a model
loads, instead of torch's ``UnpicklingError: invalid load key`` without a file name.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

__all__ = ["CheckpointDamaged", "check_checkpoint_file"]


class CheckpointDamaged(ValueError):
    """A checkpoint file that cannot be read; ``path`` names it, ``cause`` says why."""

    def __init__(self, path: Path, cause: str) -> None:
        self.path, self.cause = Path(path), " ".join(str(cause).split())[:300]
        super().__init__(f"checkpoint {self.path} cannot be read ({self.cause}): it is damaged")

    def __reduce__(self) -> tuple[object, ...]:
        return (CheckpointDamaged, (self.path, self.cause))


def check_checkpoint_file(path: Path) -> None:
    """Check that ``path`` (a ``trainer.pt``) is a whole checkpoint: the zip archive
    ``torch.save`` writes, every member's CRC intact.

    Raises:
        CheckpointDamaged: it is not (names the file and the cause).
    """
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
        raise CheckpointDamaged(path, f"{type(err).__name__}: {err}") from None
    if bad is not None:
        raise CheckpointDamaged(path, f"its member {bad} fails its CRC check")
