"""The tag-scheme decisions of `run_ner.py`: which span scheme (IOB1, IOB2, BIOES) the data, the model's labels and
its head use, the label list of a fresh head, and tags moved between the schemes. Tags that are not spans (POS) keep
every scheme `None` and pass through unchanged."""

from dataclasses import dataclass

from modeling_slstm.tag_schemes import (
    ENTITY_PREFIXES,
    convert_tag_sequence,
    detect_tag_scheme,
    is_span_tag,
    label_set_scheme,
    normalize_scheme_name,
    split_tag,
)
from modeling_slstm.token_tagging import are_placeholders
from run_scripts.training.usage_errors import UsageError, as_usage_error


@dataclass(frozen=True)
class TagSchemes:
    """The span schemes of a run (`IOB1`, `IOB2`, `BIOES`), decided once by `decide_tag_schemes`; all `None` for tags
    that are not spans (POS).

    Args:
        data (`str`, *optional*): the scheme of the data files, in which `predictions.txt` is written.
        labels (`str`, *optional*): the scheme of the model's labels (`id2label`), which the data is converted to. A
            fresh model trained in BIOES keeps IOB2 labels, which `pipeline("token-classification")` groups correctly.
        head (`str`, *optional*): the scheme the head trains and decodes in: BIOES for a `head_tag_scheme="BIOES"`
            head (IOB2 labels), else `labels`.
    """

    data: str | None = None
    labels: str | None = None
    head: str | None = None

    @property
    def span_task(self) -> bool:
        return self.data is not None


def decide_tag_schemes(splits: dict, data_args, checkpoint_config) -> TagSchemes:
    """The run's `TagSchemes`, from the data, --data_tag_scheme, --tag_scheme and, when continuing from a
    checkpoint with labels (`checkpoint_config`), the checkpoint's labels and head: a --tag_scheme that differs from
    them is an error rather than data the model's labels cannot hold."""
    if not all(is_span_tag(tag) for split in splits.values() for example in split for tag in example["tags"]):
        if data_args.tag_scheme:
            raise UsageError(f"--tag_scheme {data_args.tag_scheme} given but the labels are not span tags (e.g. POS)")
        return TagSchemes()
    with as_usage_error():  # a scheme name that --tag_scheme or --data_tag_scheme gives, or the data's tags
        if data_args.data_tag_scheme:
            data_scheme = normalize_scheme_name(data_args.data_tag_scheme)
        else:
            reference = splits["train"] if "train" in splits else next(iter(splits.values()))
            data_scheme = detect_tag_scheme(example["tags"] for example in reference)
        requested = normalize_scheme_name(data_args.tag_scheme) if data_args.tag_scheme else None
    if checkpoint_config is None:
        # IOB1 label sets look like IOB2 ones, so the CRF's IOB2 constraints would forbid IOB1's entity-opening I-
        # tags: train in IOB2 (predictions.txt is converted back to IOB1).
        head = requested or ("IOB2" if data_scheme == "IOB1" else data_scheme)
        return TagSchemes(data_scheme, "IOB2" if head == "BIOES" else head, head)
    labels = [checkpoint_config.id2label[index] for index in range(checkpoint_config.num_labels)]
    if are_placeholders(tuple(labels)):  # a pretrained encoder: a new head for the data's labels
        label_scheme = requested or "IOB2"
        return TagSchemes(data_scheme, label_scheme, label_scheme)
    label_scheme = label_set_scheme(labels) or data_scheme
    head = "BIOES" if getattr(checkpoint_config, "head_tag_scheme", None) == "BIOES" else label_scheme
    if requested is not None and requested != head:
        raise UsageError(
            f"--tag_scheme {requested} given, but {checkpoint_config.name_or_path} trains in {head}: leave "
            "--tag_scheme out when continuing from a checkpoint, or train a fresh model"
        )
    return TagSchemes(data_scheme, label_scheme, head)


def in_scheme(tags, source: str | None, target: str | None) -> list[str]:
    """`tags` of span scheme `source` in scheme `target` (unchanged when either is `None`: tags that are not spans)."""
    if source is None or target is None or source == target:
        return list(tags)
    return convert_tag_sequence(tags, source, target)


def fresh_label_list(splits: dict, include_eval_labels: bool, schemes: TagSchemes) -> list[str]:
    """The labels of a new head in id order: those of the training data (all splits with --include_eval_labels)
    in the scheme of the labels, completed to every prefix of each entity type for span tags."""
    label_splits = splits.values() if include_eval_labels else [splits["train"]]
    tags = {tag for split in label_splits for e in split for tag in in_scheme(e["tags"], schemes.data, schemes.labels)}
    return complete_span_labels(tags, schemes.labels) if schemes.span_task else sorted(tags)


def complete_span_labels(labels, scheme: str) -> list[str]:
    """`O`, then every prefix of `scheme` (B, I, E, S) for every entity type of `labels`, types sorted: a type's rare
    `I-`/`E-` tag may be missing from a small training set yet appear in dev/test."""
    types = sorted({split_tag(label)[1] for label in labels if label != "O"})
    return ["O"] + [f"{prefix}-{entity_type}" for entity_type in types for prefix in ENTITY_PREFIXES[scheme]]
