"""Tiny Hugging Face model folders built offline, one per task, for the tests and
benchmarks/hf_vs_optimum.py.

Each folder is what ``save_pretrained`` writes at the end of training: ``config.json``,
``model.safetensors`` and, for text models, a fast tokenizer trained here on a few
sentences with the ``tokenizers`` library (WordPiece for BERT-style models, byte-level
BPE for GPT-2 / RoBERTa / Llama) and saved with ``PreTrainedTokenizerFast.save_pretrained``.

Weights are random, so each config uses ``initializer_range`` 0.2 (transformers' default
0.02 leaves the outputs of such small models nearly constant across inputs, and every check
of them inconclusive: docs/concepts/verification.md). Seeded: the same folder on every call.

``python tests/hf_models.py DIR`` writes them all to DIR.
"""

from __future__ import annotations

import sys
from pathlib import Path

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "navigator converts trained models into verified deployable formats",
    "a tokenizer turns text into token ids before the model sees it",
    "hello world, this is a small test of the serving path",
    "models are exported to onnx, torchscript and torch export",
    "the server answers every request with logits and labels",
    "short text", "another sentence about nothing in particular",
    "Triton Inference Server runs ensembles of several steps",
]
INIT = 0.2
LABELS3 = {0: "negative", 1: "neutral", 2: "positive"}


# --------------------------------------------------------------------------- tokenizers
def wordpiece_tokenizer(vocab_size: int = 300, max_length: int = 64):
    """A BERT-style tokenizer: lower-casing, [CLS] A [SEP] (B [SEP]) with token types 0 / 1."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(SENTENCES * 3, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_length,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def bpe_tokenizer(vocab_size: int = 320, max_length: int = 64, style: str = "gpt2"):
    """A byte-level BPE tokenizer: GPT-2 style (one <|endoftext|> token, used as pad) or RoBERTa
    style (<s> A </s>, <pad> = 1)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=style == "roberta")
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>"] if style == "gpt2" else ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(SENTENCES * 3, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if style == "gpt2":
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                       unk_token="<|endoftext|>", pad_token="<|endoftext|>",
                                       model_max_length=max_length)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=True)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", cls_token="<s>", sep_token="</s>", mask_token="<mask>",
                                   model_max_length=max_length)


# --------------------------------------------------------------------------- models
def _save(model, folder: Path, tokenizer=None, processor=None) -> Path:
    folder = Path(folder)
    model.eval().save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    if processor is not None:
        processor.save_pretrained(folder)
    return folder


def _seed():
    import torch

    torch.manual_seed(0)


def _bert_config(**extra):
    from transformers import BertConfig

    return BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, initializer_range=INIT,
                      **extra)


def bert_classifier(folder):
    """text-classification: BERT with token types and labels, a WordPiece tokenizer."""
    from transformers import BertForSequenceClassification

    _seed()
    cfg = _bert_config(num_labels=3, id2label=LABELS3, label2id={v: k for k, v in LABELS3.items()})
    return _save(BertForSequenceClassification(cfg), folder, wordpiece_tokenizer())


def roberta_tagger(folder):
    """token-classification: RoBERTa (positions counted from the pad id: 66 positions, 64 usable)."""
    from transformers import RobertaConfig, RobertaForTokenClassification

    _seed()
    cfg = RobertaConfig(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, num_labels=5, initializer_range=INIT)
    return _save(RobertaForTokenClassification(cfg), folder, bpe_tokenizer(style="roberta"))


def bert_qa(folder):
    """question-answering: start and end logits."""
    from transformers import BertForQuestionAnswering

    _seed()
    return _save(BertForQuestionAnswering(_bert_config()), folder, wordpiece_tokenizer())


def distilbert_mlm(folder):
    """fill-mask: DistilBERT (no token types)."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    _seed()
    cfg = DistilBertConfig(vocab_size=300, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64,
                           initializer_range=INIT)
    return _save(DistilBertForMaskedLM(cfg), folder, wordpiece_tokenizer())


def gpt2_lm(folder):
    """text-generation: GPT-2 without KV cache, a byte-level BPE tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed()
    cfg = GPT2Config(vocab_size=320, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0,
                     pad_token_id=0, initializer_range=INIT)
    return _save(GPT2LMHeadModel(cfg), folder, bpe_tokenizer())


def llama_lm(folder):
    """text-generation: Llama (RoPE, grouped-query attention, RMSNorm)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _seed()
    cfg = LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
                      pad_token_id=0, initializer_range=INIT, tie_word_embeddings=False)
    return _save(LlamaForCausalLM(cfg), folder, bpe_tokenizer())


def bert_features(folder):
    """feature-extraction: BertModel (last_hidden_state and pooler_output)."""
    from transformers import BertModel

    _seed()
    return _save(BertModel(_bert_config()), folder, wordpiece_tokenizer())


def vit_classifier(folder):
    """image-classification: ViT, whose patch grid fixes the image size (static pixels)."""
    from transformers import ViTConfig, ViTForImageClassification

    _seed()
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, num_labels=4, initializer_range=INIT)
    return _save(ViTForImageClassification(cfg), folder)


def convnext_classifier(folder):
    """image-classification: ConvNeXt, which takes other image sizes (dynamic pixels)."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    _seed()
    cfg = ConvNextConfig(hidden_sizes=[8, 16, 32, 32], depths=[1, 1, 1, 1], image_size=64, num_labels=4,
                         initializer_range=INIT)
    return _save(ConvNextForImageClassification(cfg), folder)


def yolos_detector(folder):
    """object-detection: YOLOS (logits and pred_boxes)."""
    from transformers import YolosConfig, YolosForObjectDetection

    _seed()
    cfg = YolosConfig(image_size=[32, 32], patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, num_detection_tokens=5, num_labels=3, initializer_range=INIT)
    return _save(YolosForObjectDetection(cfg), folder)


def _wav2vec2_config(**extra):
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, conv_dim=(16, 16, 16), conv_stride=(5, 4, 2),
                          conv_kernel=(10, 8, 4), num_feat_extract_layers=3, num_conv_pos_embeddings=16,
                          num_conv_pos_embedding_groups=4, feat_extract_norm="group", do_stable_layer_norm=False,
                          initializer_range=INIT, **extra)


def wav2vec2_ctc(folder):
    """automatic-speech-recognition: Wav2Vec2 with a CTC head over raw audio."""
    from transformers import Wav2Vec2ForCTC

    _seed()
    return _save(Wav2Vec2ForCTC(_wav2vec2_config()), folder)


def wav2vec2_audio_classifier(folder):
    """audio-classification: Wav2Vec2 pooled into a classifier."""
    from transformers import Wav2Vec2ForSequenceClassification

    _seed()
    return _save(Wav2Vec2ForSequenceClassification(_wav2vec2_config(num_labels=4, classifier_proj_size=16)), folder)


def whisper_audio_classifier(folder):
    """audio-classification: Whisper's encoder on log-mel features (a fixed number of frames)."""
    from transformers import WhisperConfig, WhisperForAudioClassification

    _seed()
    cfg = WhisperConfig(vocab_size=64, num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=2,
                        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_source_positions=16, max_target_positions=16, num_labels=4, classifier_proj_size=16,
                        pad_token_id=0, bos_token_id=1, eos_token_id=1, decoder_start_token_id=2, init_std=INIT)
    return _save(WhisperForAudioClassification(cfg), folder)


# task -> builders of that task (the first one is the task's representative in fast tests)
BUILDERS = {
    "text-classification": [bert_classifier],
    "token-classification": [roberta_tagger],
    "question-answering": [bert_qa],
    "fill-mask": [distilbert_mlm],
    "text-generation": [gpt2_lm, llama_lm],
    "feature-extraction": [bert_features],
    "image-classification": [vit_classifier, convnext_classifier],
    "object-detection": [yolos_detector],
    "automatic-speech-recognition": [wav2vec2_ctc],
    "audio-classification": [wav2vec2_audio_classifier, whisper_audio_classifier],
}
ALL = {b.__name__: b for builders in BUILDERS.values() for b in builders}


def build(name: str, root) -> Path:
    """The folder of model ``name`` under ``root`` (built once)."""
    folder = Path(root) / name
    if not (folder / "config.json").is_file():
        ALL[name](folder)
    return folder


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "hf_models")
    for name in ALL:
        print(build(name, out))
