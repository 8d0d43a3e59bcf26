"""Progress bars for the long commands (calibrate, tune, costmodel report): svod's own
(`svod.progress`: tqdm on stderr when it is a terminal, else silent), re-exported here
where costmodels has always imported them from."""

from __future__ import annotations

from svod.progress import Silent, bar, wanted

__all__ = ["Silent", "bar", "wanted"]
