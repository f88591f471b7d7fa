"""The sentence-transformers configuration of a dense model (pooling, normalisation) is read or
the load fails loudly: only a checkpoint that has none falls back to mean pooling."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from hf_dr.models import ModelLoadError
from hf_dr.models.dense import DenseEncoder, _st_settings

ST_MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
              {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]


@pytest.fixture
def st_dir(tmp_path, tiny_bert_dir):
    """The tiny model as a sentence-transformers folder: CLS pooling, normalised."""
    d = tmp_path / "st"
    shutil.copytree(tiny_bert_dir, d)
    (d / "modules.json").write_text(json.dumps(ST_MODULES))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    return d


def test_settings_are_read_and_a_plain_checkpoint_falls_back(st_dir, tiny_bert_dir):
    enc = DenseEncoder.from_pretrained(st_dir)
    assert (enc.pooling, enc.normalize) == ("cls", True)
    assert _st_settings(str(tiny_bert_dir)) == {}  # no sentence-transformers files: the defaults


@pytest.mark.parametrize("name, text", [("modules.json", "[{not json"), ("1_Pooling/config.json", "{")])
def test_malformed_config_is_an_error_not_mean_pooling(st_dir, name, text):
    (st_dir / name).write_text(text)
    with pytest.raises(ModelLoadError, match=f"{name}.*malformed JSON"):
        DenseEncoder.from_pretrained(st_dir)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_config_is_an_error(st_dir):
    (st_dir / "modules.json").chmod(0)
    with pytest.raises(ModelLoadError, match="modules.json.*cannot be read"):
        DenseEncoder.from_pretrained(st_dir)


def test_hub_id_whose_config_cannot_be_fetched_is_an_error(monkeypatch):
    import huggingface_hub
    from requests.exceptions import ConnectionError as RequestsConnectionError

    def unreachable(*a, **k):
        raise RequestsConnectionError("Max retries exceeded with url: https://huggingface.co/api/models/someone/model")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(ModelLoadError, match=r"someone/model.*sentence-transformers configuration.*ConnectionError"):
        _st_settings("someone/model")


def test_hub_id_without_sentence_transformers_files_falls_back(monkeypatch, tmp_path):
    import huggingface_hub

    (tmp_path / "config.json").write_text('{"model_type": "bert"}')  # all the *.json a plain checkpoint has
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(tmp_path))
    assert _st_settings("someone/plain-bert") == {}
