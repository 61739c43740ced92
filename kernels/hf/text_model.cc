// What every layer shares (text_model.h).
#include "kernels/hf/text_model.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/hf/sources.h"

namespace posenc::hf {

std::string KeyPath(const TextModel& m, absl::string_view key) {
  return absl::StrCat(m.path_prefix, key);
}

namespace {

// The head dim: the rotary part of MLA heads, else head_dim (or the class default), else
// hidden_size / num_attention_heads (GPT-J: n_embd / n_head), floor division as Python.
absl::Status ReadHeadDim(TextModel* m) {
  const Family& f = *m->family;
  std::string head_key;  // where head_dim came from ("" : the class default)
  if (f.rope_head_dim) {
    POSENC_ASSIGN_OR_RETURN(m->head_dim, GetText<int64_t>(*m, "qk_rope_head_dim"));
    if (m->head_dim) head_key = KeyPath(*m, "qk_rope_head_dim");
    if (!m->head_dim) {
      m->head_dim = 64;  // DeepseekV2Config / DeepseekV3Config default
      Defaulted(&m->sources, f, "head_dim", "qk_rope_head_dim", "64");
    }
  } else if (f.chatglm) {
    POSENC_ASSIGN_OR_RETURN(m->head_dim, GetText<int64_t>(*m, "kv_channels"));
    if (m->head_dim) head_key = KeyPath(*m, "kv_channels");
  } else {
    POSENC_ASSIGN_OR_RETURN(m->head_dim,
                            GetFirst<int64_t>(*m, {"head_dim", "qk_rope_head_dim"}, &head_key));
    if (!m->head_dim && f.head_dim) {
      m->head_dim = f.head_dim;
      Defaulted(&m->sources, f, "head_dim", "head_dim", absl::StrCat(*f.head_dim));
    }
  }
  if (!m->head_dim) {
    std::string hidden_key, heads_key;
    POSENC_ASSIGN_OR_RETURN(
        std::optional<int64_t> hidden,
        GetFirst<int64_t>(*m, {"hidden_size", "n_embd", "d_model"}, &hidden_key));
    POSENC_ASSIGN_OR_RETURN(std::optional<int64_t> heads,
                            GetFirst<int64_t>(*m, {"num_attention_heads", "n_head"}, &heads_key));
    if (hidden.has_value() && heads.has_value()) {
      if (*heads <= 0 || *hidden <= 0) {
        return Invalid(
            absl::StrCat("hidden_size / num_attention_heads: expected positive values, "
                         "got ",
                         *hidden, " / ", *heads));
      }
      m->head_dim = *hidden / *heads;
      head_key = absl::StrCat(hidden_key, " / ", heads_key);
    }
  }
  if (!head_key.empty()) ReadFrom(&m->sources, f, "head_dim", head_key, absl::StrCat(*m->head_dim));
  if (m->head_dim && *m->head_dim <= 0) {
    return Invalid(absl::StrCat("head dim must be > 0, got ", *m->head_dim));
  }
  return absl::OkStatus();
}

// max_position_embeddings (or its older names), else the class default.
absl::Status ReadMaxPosition(TextModel* m) {
  const Family& f = *m->family;
  std::string max_key;
  POSENC_ASSIGN_OR_RETURN(
      m->max_position,
      GetFirst<int64_t>(*m, {"max_position_embeddings", "n_positions", "seq_length"}, &max_key));
  if (m->max_position) {
    ReadFrom(&m->sources, f, "max_position_embeddings", max_key, absl::StrCat(*m->max_position));
  } else if (f.max_position) {
    m->max_position = f.max_position;
    Defaulted(&m->sources, f, "max_position_embeddings", "max_position_embeddings",
              absl::StrCat(*f.max_position));
  }
  return absl::OkStatus();
}

// The base (rope_theta and its older names; ChatGLM's rope_ratio), the partial rotary fraction or
// absolute rotary_dim (or the class default), and a top-level original_max_position_embeddings.
absl::Status ReadBaseAndRotary(TextModel* m) {
  const Family& f = *m->family;
  POSENC_ASSIGN_OR_RETURN(m->theta,
                          GetFirst<double>(*m, {"rope_theta", "rotary_emb_base"}, &m->theta_key));
  if (!f.global_theta_key.empty() && !m->theta) {
    POSENC_ASSIGN_OR_RETURN(m->theta, GetFirst<double>(*m, {f.global_theta_key}, &m->theta_key));
  }
  if (f.chatglm) {
    POSENC_ASSIGN_OR_RETURN(std::optional<double> ratio, GetText<double>(*m, "rope_ratio"));
    m->theta = 10000.0 * ratio.value_or(1.0);
    m->theta_key = "10000 * rope_ratio";
  }

  POSENC_ASSIGN_OR_RETURN(
      m->fraction, GetFirst<double>(*m, {"partial_rotary_factor", "rotary_pct"}, &m->fraction_key));
  POSENC_ASSIGN_OR_RETURN(m->rotary_dim, GetText<int64_t>(*m, "rotary_dim"));
  if (!m->fraction && !m->rotary_dim) {
    if (f.partial) {
      m->fraction = f.partial;
      m->fraction_key = "the class default partial_rotary_factor";
      m->fraction_default = true;
    } else if (f.rotary_dim && !Find(*m->text, "rotary_dim")) {
      m->rotary_dim = f.rotary_dim;
      m->rotary_dim_default = true;
    }
  }
  POSENC_ASSIGN_OR_RETURN(m->original_max,
                          GetText<int64_t>(*m, "original_max_position_embeddings"));
  return absl::OkStatus();
}

// The pairing: the architecture's, or rope_interleave (DeepSeek V3's key, default per family).
absl::Status ReadPairing(TextModel* m) {
  const Family& f = *m->family;
  switch (f.pairing) {
    case Pairing::kNeox: m->style = kernels::RopeStyle::kNeox; break;
    case Pairing::kGptj: m->style = kernels::RopeStyle::kGptj; break;
    case Pairing::kInterleaveFlag: break;
    case Pairing::kDeepseek: m->style = kernels::RopeStyle::kDeepseek; break;
  }
  POSENC_ASSIGN_OR_RETURN(std::optional<bool> interleave, GetText<bool>(*m, "rope_interleave"));
  if (f.pairing == Pairing::kDeepseek) {
    if (interleave == false) {
      m->warnings.push_back(absl::StrCat(
          KeyPath(*m, "rope_interleave"), ": false is not read by transformers for model_type '",
          f.model_types.front(), "' (", f.source, "): its attention always rotates interleaved"));
    }
    Defaulted(&m->sources, f, "pairing", "the attention's rotation (interleaved, always)",
              std::string(kernels::RopeStyleName(m->style)));
    return absl::OkStatus();
  }
  if (f.pairing == Pairing::kInterleaveFlag || interleave.has_value()) {
    const bool on = interleave.value_or(f.interleave_default);
    if (on) {
      m->style = kernels::RopeStyle::kDeepseek;
    } else if (f.pairing == Pairing::kInterleaveFlag) {
      m->style = kernels::RopeStyle::kNeox;
    }
  }
  if (interleave.has_value()) {
    ReadFrom(&m->sources, f, "pairing", KeyPath(*m, "rope_interleave"),
             std::string(kernels::RopeStyleName(m->style)));
  } else {
    Defaulted(&m->sources, f, "pairing",
              f.pairing == Pairing::kInterleaveFlag
                  ? absl::StrCat("rope_interleave (class default ",
                                 f.interleave_default ? "true" : "false", ")")
                  : std::string("the architecture's rotation"),
              std::string(kernels::RopeStyleName(m->style)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadTextModel(TextModel* m) {
  POSENC_RETURN_IF_ERROR(ReadHeadDim(m));
  POSENC_RETURN_IF_ERROR(ReadMaxPosition(m));
  POSENC_RETURN_IF_ERROR(ReadBaseAndRotary(m));
  return ReadPairing(m);
}

}  // namespace posenc::hf
