"""The PyTorch definition of the zoo's BERT_pytorch (BERT-base).

    from bert_ref import make_bert, disable_dropout
    model = make_bert(num_layers)          # 12 for bench, 2 for smoke
    logits = model(tokens)                 # tokens [B, S] int64 -> [B, S, 30522]

Token (30522), position (512) and segment (2) embeddings, summed, then
LayerNorm (eps 1e-12) and dropout 0.1; num_layers post-norm
nn.TransformerEncoderLayer(768, 12, 3072, 0.1, activation="gelu",
batch_first=True); a linear head to the vocabulary. Every sequence is one
segment (ids 0) without padding, so there is no attention mask. The
state_dict keys are the names models/bert.c gives its parameters:

    embedding.token.weight, embedding.position.weight,
    embedding.segment.weight, embedding.norm.{weight,bias},
    encoder.layers.N.self_attn.{in_proj_weight,in_proj_bias,out_proj.*},
    encoder.layers.N.linear{1,2}.*, encoder.layers.N.norm{1,2}.*,
    head.{weight,bias}

Dropout also acts inside nn.MultiheadAttention (on the attention
probabilities), where it is a float attribute, not an nn.Dropout module:
use disable_dropout(model) (or make_bert(n, dropout=0.0)) for parity runs,
not model.eval() on the Dropout modules alone.
"""
import torch
from torch import nn

VOCAB = 30522
HIDDEN = 768
HEADS = 12
FFN = 3072
MAX_LEN = 512
SEGMENTS = 2


class BERTEmbedding(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.token = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(MAX_LEN, HIDDEN)
        self.segment = nn.Embedding(SEGMENTS, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens):
        seq = tokens.shape[1]
        positions = torch.arange(seq, device=tokens.device).unsqueeze(0)
        segments = torch.zeros_like(tokens)
        x = self.token(tokens) + self.position(positions) + self.segment(segments)
        return self.dropout(self.norm(x))


class BERT(nn.Module):
    def __init__(self, num_layers, dropout=0.1):
        super().__init__()
        self.embedding = BERTEmbedding(dropout)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout, activation="gelu",
                                           batch_first=True)
        # the nested-tensor fast path only applies with a padding mask; off
        # keeps the module on the plain path in every mode
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        return self.head(self.encoder(self.embedding(tokens)))


def make_bert(num_layers, dropout=0.1):
    return BERT(num_layers, dropout)


def disable_dropout(model):
    """Sets every dropout probability of the model to 0, including the
    attention-probability dropout nn.MultiheadAttention keeps as a float."""
    for mod in model.modules():
        if isinstance(mod, nn.Dropout):
            mod.p = 0.0
        elif isinstance(mod, nn.MultiheadAttention):
            mod.dropout = 0.0
    return model
