"""What goes wrong when publishing: a folder that cannot be published (:class:`HubError`), and a Hub
that cannot be reached or refuses the upload (:func:`hub_errors`, said in one line by
:func:`hub_error_message`)."""

from __future__ import annotations

import contextlib

__all__ = ["HubError", "hub_errors", "hub_error_message"]


class HubError(ValueError):
    """A folder that cannot be published (not a hf-dr model, missing template...)."""


def hub_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of an unreachable or refusing Hub (offline mode, connection, HTTP status, no token)."""
    errs: list[type[BaseException]] = [ConnectionError, TimeoutError]
    with contextlib.suppress(ImportError):
        from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

        errs += [HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled]
    with contextlib.suppress(ImportError):
        import httpx

        errs.append(httpx.HTTPError)
    with contextlib.suppress(ImportError):
        import requests

        errs.append(requests.RequestException)
    return tuple(errs)


def hub_error_message(e: BaseException, repo_id: str) -> str:
    """One line saying what went wrong with the Hub and what to do."""
    first = (str(e).strip().splitlines() or [""])[0][:200]
    what = f"{type(e).__name__}: {first}" if first else type(e).__name__
    status = getattr(getattr(e, "response", None), "status_code", None)
    if type(e).__name__ == "LocalTokenNotFoundError" or status in (401, 403):
        return (f"the Hugging Face Hub refused to publish {repo_id} ({what}): log in (`hf auth login`), or pass "
                "--token / set HF_TOKEN with write access, or write the folder with --local-dir")
    if isinstance(status, int) and not isinstance(e, ConnectionError):
        return (f"the Hugging Face Hub answered {status} for {repo_id} ({what}): check the repo id and your "
                "rights on it, or write the folder with --local-dir")
    return (f"could not reach the Hugging Face Hub ({what}): check the network / HF_HUB_OFFLINE, or write the "
            "folder with --local-dir")
