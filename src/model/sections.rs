//! The registry of stored sections: every section a model bundle can hold ([`SECTIONS`]), its
//! dtype, and the stage it belongs to, with each stage's writer beside its reader.
//!
//! The trainer lays a model out with the `write_*` functions and [`Model`](super::Model) opens it
//! with the `load_*` ones (the text vectorizer's reader is [`crate::text::TextView::open`], the
//! name sections' is the model's lazy names). Section names are built here and nowhere else. A new
//! stage adds its sections to [`SECTIONS`], its name builders, a writer and a reader; a test trains
//! a model of every kind and fails on a written section the registry lacks or the model never
//! reads.

use super::{
    MappedBp, MappedDefrag, MappedOuts, MappedOva, MappedRows, MappedTree, ModelError, ModelMeta,
};
use crate::bundle::{Bundle, BundleWriter, Dtype, FormatError};
use crate::config::WeightFormat;
use crate::defrag::train::{DefragArrays, Prototypes};
use crate::defrag::view::DefragView;
use crate::rerank::train::OvaArrays;
use crate::rerank::{LabelRows, OvaScorers};
use crate::router::{BlockArrays, BpArrays, BpMeta};
use crate::text::Fitted;
use crate::tree::chunk::{Chunks, Widths, narrowest, pack_entries};
use crate::tree::view::TreeArrays;
use std::borrow::Cow;

/// The part of a model a section belongs to: the stage that writes it and reads it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The JSON metadata: settings, shapes, statistics.
    Meta,
    /// Per-label training statistics.
    Labels,
    /// A label tree's arrays: an ensemble member's, the BP router's or a BP block's.
    Tree,
    /// A flat tree's bias order, by which it is scored through its postings.
    Flat,
    /// The BP stage's own arrays besides its trees.
    Bp,
    /// DEFRAG's feature agglomeration and FIAT's scales.
    Defrag,
    /// REFRAG's label prototypes.
    Refrag,
    /// The OVA reranker's scorers.
    Ova,
    /// FIAT's C^F over the input features.
    Fiat,
    /// Label and feature names.
    Names,
    /// The text vectorizer.
    Text,
}

/// One kind of stored section.
#[derive(Clone, Copy, Debug)]
pub struct SectionKind {
    /// The name, or its pattern: `{t}` stands for a tree's index, `{b}` for a BP block's, and a
    /// name that starts with `{tree}.` for one of [`TREE_PREFIXES`].
    pub name: &'static str,
    /// The dtypes it may be stored as.
    pub dtypes: &'static [Dtype],
    /// The stage it belongs to.
    pub stage: Stage,
}

/// The prefixes under which a label tree's arrays are stored: an ensemble member's, the BP
/// router's and a BP block's model.
pub const TREE_PREFIXES: [&str; 3] = ["tree.{t}", ROUTER_PREFIX, "bp.{b}.t"];

const fn kind(name: &'static str, dtypes: &'static [Dtype], stage: Stage) -> SectionKind {
    SectionKind {
        name,
        dtypes,
        stage,
    }
}

const U32: &[Dtype] = &[Dtype::U32];
const F32: &[Dtype] = &[Dtype::F32];
const JSON: &[Dtype] = &[Dtype::Json];
const BYTES: &[Dtype] = &[Dtype::Bytes];

/// Every section a model bundle can hold.
pub const SECTIONS: &[SectionKind] = &[
    kind(META, JSON, Stage::Meta),
    kind(TRAIN_COUNT, U32, Stage::Labels),
    kind(LABEL_NAMES, JSON, Stage::Names),
    kind(FEATURE_NAMES, JSON, Stage::Names),
    kind("{tree}.node_info", U32, Stage::Tree),
    kind("{tree}.out_start", U32, Stage::Tree),
    kind("{tree}.out_ids", U32, Stage::Tree),
    kind("{tree}.out_bias", F32, Stage::Tree),
    kind("{tree}.chunk.feat_start", U32, Stage::Tree),
    kind("{tree}.chunk.feat", U32, Stage::Tree),
    kind("{tree}.chunk.entry_start", U32, Stage::Tree),
    // Either packed bfloat16 entries, or outputs at their narrowest width and `f32` weights.
    kind("{tree}.chunk.entry", U32, Stage::Tree),
    kind(
        "{tree}.chunk.entry_out",
        &[Dtype::U8, Dtype::U16, Dtype::U32],
        Stage::Tree,
    ),
    kind("{tree}.chunk.entry_weight", F32, Stage::Tree),
    kind("{tree}.chunk.hash_start", U32, Stage::Tree),
    kind("{tree}.chunk.hash", U32, Stage::Tree),
    // Absent from bundles written before the rank index and before rows.
    kind("{tree}.chunk.rank_start", U32, Stage::Tree),
    kind("{tree}.chunk.rank", U32, Stage::Tree),
    kind("{tree}.chunk.row_start", U32, Stage::Tree),
    // `f32` rows, or bfloat16 pairs (format version 4).
    kind("{tree}.chunk.row_weight", F32, Stage::Tree),
    kind("{tree}.chunk.row_packed", U32, Stage::Tree),
    // Only a flat tree's, and absent from flat trees written before the postings scorer.
    kind("tree.{t}.flat.order", U32, Stage::Flat),
    kind("bp.{b}.labels", U32, Stage::Bp),
    kind("defrag.{t}.map", U32, Stage::Defrag),
    kind("defrag.{t}.sizes", U32, Stage::Defrag),
    kind("defrag.{t}.scale", F32, Stage::Defrag),
    kind("refrag.{t}.start", U32, Stage::Refrag),
    kind("refrag.{t}.idx", U32, Stage::Refrag),
    kind("refrag.{t}.val", F32, Stage::Refrag),
    kind("refrag.input.start", U32, Stage::Refrag),
    kind("refrag.input.idx", U32, Stage::Refrag),
    kind("refrag.input.val", F32, Stage::Refrag),
    kind("rerank.ova.start", U32, Stage::Ova),
    kind("rerank.ova.idx", U32, Stage::Ova),
    kind("rerank.ova.val", F32, Stage::Ova),
    kind("rerank.ova.bias", F32, Stage::Ova),
    kind("fiat.start", U32, Stage::Fiat),
    kind("fiat.idx", U32, Stage::Fiat),
    kind("fiat.val", F32, Stage::Fiat),
    kind(crate::text::VOCAB_SECTION, BYTES, Stage::Text),
    kind(crate::text::IDF_SECTION, F32, Stage::Text),
    // Absent from vectorizers fitted before the term index.
    kind(crate::text::index::SLOTS_SECTION, U32, Stage::Text),
    kind(crate::text::index::TERMS_SECTION, BYTES, Stage::Text),
];

/// The registry's entry for the section called `name`, if it names one.
pub fn kind_of(name: &str) -> Option<&'static SectionKind> {
    SECTIONS
        .iter()
        .find(|k| match k.name.strip_prefix("{tree}.") {
            Some(array) => TREE_PREFIXES.iter().any(|p| {
                name.strip_suffix(array)
                    .and_then(|n| n.strip_suffix('.'))
                    .is_some_and(|prefix| matches(p, prefix))
            }),
            None => matches(k.name, name),
        })
}

/// Whether `name` fits `pattern`, dot-separated part by part, `{t}` and `{b}` fitting a decimal
/// number.
fn matches(pattern: &str, name: &str) -> bool {
    let (mut p, mut n) = (pattern.split('.'), name.split('.'));
    loop {
        match (p.next(), n.next()) {
            (None, None) => return true,
            (Some("{t}" | "{b}"), Some(part)) => {
                if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
                    return false;
                }
            }
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

// --- The metadata, label statistics and names ---------------------------------------------

/// The metadata section (JSON), written last.
pub const META: &str = "meta";

/// Every label's training-set count.
pub const TRAIN_COUNT: &str = "labels.train_count";

/// The label names, a JSON array of strings.
pub const LABEL_NAMES: &str = "label_names";

/// The feature names, a JSON array of strings.
pub const FEATURE_NAMES: &str = "feature_names";

/// Adds the optional name sections to `w`.
pub fn write_names<'a>(
    w: &mut BundleWriter<'a>,
    label_names: Option<&[String]>,
    feature_names: Option<&[String]>,
) -> Result<(), FormatError> {
    if let Some(names) = label_names {
        w.add_json(LABEL_NAMES, &names)?;
    }
    if let Some(names) = feature_names {
        w.add_json(FEATURE_NAMES, &names)?;
    }
    Ok(())
}

/// Every label's training-set count, checked against the metadata's label count.
pub(super) fn load_train_counts(
    bundle: &Bundle,
    meta: &ModelMeta,
) -> Result<crate::bundle::Section<u32>, ModelError> {
    let train_counts = bundle.u32s(TRAIN_COUNT)?;
    if train_counts.len() != meta.n_labels {
        return Err(ModelError::Meta(format!(
            "{TRAIN_COUNT} has {} entries for {} labels",
            train_counts.len(),
            meta.n_labels
        )));
    }
    Ok(train_counts)
}

// --- Label trees and the BP stage ---------------------------------------------------------

/// The section prefix of ensemble member `t`'s tree arrays.
pub fn tree_prefix(t: usize) -> String {
    format!("tree.{t}")
}

/// The section name of array `array` of tree `t`.
pub fn tree_section(t: usize, array: &str) -> String {
    format!("tree.{t}.{array}")
}

/// The section prefix of the router's tree arrays.
pub const ROUTER_PREFIX: &str = "bp.router";

/// The section prefix of block `b`'s model (short: section names are at most 32 bytes).
pub fn block_tree_prefix(b: usize) -> String {
    format!("bp.{b}.t")
}

/// The section name of block `b`'s label map (local id → global id).
pub fn block_labels_section(b: usize) -> String {
    format!("bp.{b}.labels")
}

/// Adds every model array (all but `meta` and the name sections) to `w`.
pub fn write_arrays<'a>(
    w: &mut BundleWriter<'a>,
    trees: &'a [TreeArrays<Vec<u32>, Vec<f32>>],
    bp: Option<&'a BpArrays<Vec<u32>, Vec<f32>>>,
    label_counts: &'a [u32],
    weights: WeightFormat,
) -> Result<(), FormatError> {
    w.add_u32(TRAIN_COUNT, label_counts)?;
    for (t, a) in trees.iter().enumerate() {
        write_tree(w, &tree_prefix(t), a, weights)?;
    }
    if let Some(bp) = bp {
        write_tree(w, ROUTER_PREFIX, &bp.router, weights)?;
        for (b, block) in bp.blocks.iter().enumerate() {
            w.add_u32(&block_labels_section(b), &block.labels)?;
            write_tree(w, &block_tree_prefix(b), &block.tree, weights)?;
        }
    }
    Ok(())
}

/// Adds one tree's arrays as sections `{prefix}.{array}`, its entries and rows packed when
/// `weights` is bfloat16 and every output fits 16 bits.
fn write_tree<'a>(
    w: &mut BundleWriter<'a>,
    prefix: &str,
    a: &'a TreeArrays<Vec<u32>, Vec<f32>>,
    weights: WeightFormat,
) -> Result<(), FormatError> {
    let s = |name: &str| format!("{prefix}.{name}");
    w.add_u32(&s("node_info"), &a.node_info)?;
    w.add_u32(&s("out_start"), &a.out_start)?;
    w.add_u32(&s("out_ids"), &a.out_ids)?;
    w.add_f32(&s("out_bias"), &a.out_bias)?;
    w.add_u32(&s("chunk.feat_start"), &a.chunks.feat_start)?;
    w.add_u32(&s("chunk.feat"), &a.chunks.feat)?;
    w.add_u32(&s("chunk.entry_start"), &a.chunks.entry_start)?;
    let packed = match weights {
        WeightFormat::Bf16 => pack_entries(&a.chunks.entry_out, &a.chunks.entry_weight),
        WeightFormat::F32 => None,
    };
    let bf16 = packed.is_some();
    if let Some(words) = packed {
        // Instead of `entry_out` and `entry_weight`, so a reader that does not know packed
        // entries refuses the bundle rather than reading a tree without them.
        w.add_u32_owned(&s("chunk.entry"), words)?;
    } else {
        // At the narrowest width that holds the tree's largest output (see `Widths`).
        match narrowest(&a.chunks.entry_out) {
            Widths::U8(outs) => w.add_u8(&s("chunk.entry_out"), Cow::Owned(outs))?,
            Widths::U16(outs) => w.add_u16(&s("chunk.entry_out"), Cow::Owned(outs))?,
            Widths::U32(outs) => w.add_u32(&s("chunk.entry_out"), outs)?,
        };
        w.add_f32(&s("chunk.entry_weight"), &a.chunks.entry_weight)?;
    }
    w.add_u32(&s("chunk.hash_start"), &a.chunks.hash_start)?;
    w.add_u32(&s("chunk.hash"), &a.chunks.hash)?;
    w.add_u32(&s("chunk.rank_start"), &a.chunks.rank_start)?;
    w.add_u32(&s("chunk.rank"), &a.chunks.rank)?;
    if bf16 {
        // Rows as bfloat16 pairs, rounded as the entries are: every weight of the tree is then a
        // bfloat16, and whether a node got rows or entries does not change a score. Instead of
        // `row_weight` (format version 4).
        let (row_start, packed) = a.chunks.packed_rows();
        w.add_u32_owned(&s("chunk.row_start"), row_start)?;
        w.add_u32_owned(&s("chunk.row_packed"), packed)?;
    } else {
        w.add_u32(&s("chunk.row_start"), &a.chunks.row_start)?;
        w.add_f32(&s("chunk.row_weight"), &a.chunks.row_weight)?;
    }
    Ok(())
}

/// The tree arrays stored as sections `{prefix}.{array}`.
pub(super) fn load_tree(bundle: &Bundle, prefix: &str) -> Result<MappedTree, FormatError> {
    let u = |a: &str| bundle.u32s(&format!("{prefix}.{a}"));
    let f = |a: &str| bundle.f32s(&format!("{prefix}.{a}"));
    let packed = format!("{prefix}.chunk.entry");
    let (out_name, weight_name) = (
        format!("{prefix}.chunk.entry_out"),
        format!("{prefix}.chunk.entry_weight"),
    );
    // Packed entries replace both arrays; a bundle that has them and either array anyway is
    // refused by the chunk checks.
    let (entry_out, entry_weight, entry_packed) = if bundle.section(&packed).is_some() {
        (
            Widths::U8(bundle.u8s_or_empty(&out_name)?),
            bundle.f32s_or_empty(&weight_name)?,
            bundle.u32s(&packed)?,
        )
    } else {
        (
            load_outs(bundle, &out_name)?,
            bundle.f32s(&weight_name)?,
            bundle.u32s_or_empty(&packed)?,
        )
    };
    Ok(TreeArrays {
        node_info: u("node_info")?,
        out_start: u("out_start")?,
        out_ids: u("out_ids")?,
        out_bias: f("out_bias")?,
        chunks: Chunks {
            feat_start: u("chunk.feat_start")?,
            feat: u("chunk.feat")?,
            entry_start: u("chunk.entry_start")?,
            entry_out,
            entry_weight,
            entry_packed,
            hash_start: u("chunk.hash_start")?,
            hash: u("chunk.hash")?,
            // Absent from bundles written before the rank index: read as empty.
            rank_start: bundle.u32s_or_empty(&format!("{prefix}.chunk.rank_start"))?,
            rank: bundle.u32s_or_empty(&format!("{prefix}.chunk.rank"))?,
            // Absent from bundles written before rows: every node reads as entries.
            row_start: bundle.u32s_or_empty(&format!("{prefix}.chunk.row_start"))?,
            row_weight: bundle.f32s_or_empty(&format!("{prefix}.chunk.row_weight"))?,
            // Absent before format version 4, and from trees with `f32` rows.
            row_packed: bundle.u32s_or_empty(&format!("{prefix}.chunk.row_packed"))?,
        },
    })
}

/// The entry outputs in section `name`, at the width it was written at (`u32` in bundles before
/// format version 3, whose reader refuses the narrower dtypes).
fn load_outs(bundle: &Bundle, name: &str) -> Result<MappedOuts, FormatError> {
    Ok(match bundle.section(name).map(|s| s.dtype) {
        Some(Dtype::U8) => Widths::U8(bundle.u8s(name)?),
        Some(Dtype::U16) => Widths::U16(bundle.u16s(name)?),
        _ => Widths::U32(bundle.u32s(name)?),
    })
}

/// The BP sections described by `bp`, validated: in full when `deep`, else their structure
/// The section name of tree `t`'s bias order ([`crate::tree::flat`]).
pub fn flat_order_section(t: usize) -> String {
    tree_section(t, crate::tree::flat::ORDER_SECTION)
}

/// Adds each flat tree's bias order ([`crate::tree::flat`]), by which it is scored through its
/// postings (none for label trees, so their bundles are unchanged).
pub fn write_flat_orders(
    w: &mut BundleWriter<'_>,
    trees: &[TreeArrays<Vec<u32>, Vec<f32>>],
    loss: crate::linear::Loss,
) -> Result<(), FormatError> {
    for (t, a) in trees.iter().enumerate().filter(|(_, a)| a.is_flat()) {
        let order = crate::tree::flat::bias_order(&a.out_ids, &a.out_bias, loss);
        w.add_u32_owned(&flat_order_section(t), order)?;
    }
    Ok(())
}

/// Tree `t`'s bias order, empty when the bundle has none (a label tree, or a flat tree written
/// before the postings scorer); the tree checks it against its outputs.
pub(super) fn load_flat_order(
    bundle: &Bundle,
    t: usize,
) -> Result<crate::bundle::Section<u32>, FormatError> {
    bundle.u32s_or_empty(&flat_order_section(t))
}

/// (O(nodes + outputs), as for the trees).
pub(super) fn load_bp(
    bundle: &Bundle,
    meta: &ModelMeta,
    bp: &BpMeta,
    deep: bool,
) -> Result<MappedBp, ModelError> {
    let mut blocks = Vec::with_capacity(bp.q);
    for b in 0..bp.q {
        blocks.push(BlockArrays {
            labels: bundle.u32s(&block_labels_section(b))?,
            tree: load_tree(bundle, &block_tree_prefix(b))?,
        });
    }
    let arrays = BpArrays {
        router: load_tree(bundle, ROUTER_PREFIX)?,
        blocks,
    };
    if deep {
        arrays.validate(meta.n_labels, meta.n_features)?;
    } else {
        arrays.validate_structure(meta.n_labels)?;
    }
    Ok(arrays)
}

// --- DEFRAG and REFRAG --------------------------------------------------------------------

/// The section name of DEFRAG array `array` of tree `t` (`map`, `sizes`, `scale`).
pub fn defrag_section(t: usize, array: &str) -> String {
    format!("defrag.{t}.{array}")
}

/// The section name of REFRAG prototype array `array` of tree `t` (`start`, `idx`, `val`).
pub fn refrag_section(t: usize, array: &str) -> String {
    format!("refrag.{t}.{array}")
}

/// The section name of array `array` (`start`, `idx`, `val`) of REFRAG's prototypes over the
/// input features, which a model without DEFRAG stores.
pub fn input_prototype_section(array: &str) -> String {
    format!("refrag.input.{array}")
}

/// Adds each tree's DEFRAG sections (none when DEFRAG is off, so such bundles are unchanged).
pub fn write_defrag<'a>(
    w: &mut BundleWriter<'a>,
    defrag: &'a [DefragArrays],
) -> Result<(), FormatError> {
    for (t, a) in defrag.iter().enumerate() {
        w.add_u32(&defrag_section(t, "map"), &a.map)?;
        w.add_u32(&defrag_section(t, "sizes"), &a.sizes)?;
        if let Some(scale) = &a.scale {
            w.add_f32(&defrag_section(t, "scale"), scale)?;
        }
        if let Some(p) = &a.prototypes {
            w.add_u32(&refrag_section(t, "start"), &p.start)?;
            w.add_u32(&refrag_section(t, "idx"), &p.idx)?;
            w.add_f32(&refrag_section(t, "val"), &p.val)?;
        }
    }
    Ok(())
}

/// Member `t`'s DEFRAG arrays (and its REFRAG prototypes, when the model has them), validated.
pub(super) fn load_defrag(
    bundle: &Bundle,
    meta: &ModelMeta,
    t: usize,
) -> Result<MappedDefrag, ModelError> {
    let dp = &meta.config.defrag;
    let u = |a: &str| bundle.u32s(&defrag_section(t, a));
    let r = |a: &str| bundle.u32s(&refrag_section(t, a));
    let scale = if dp.fiat || dp.refrag {
        Some(bundle.f32s(&defrag_section(t, "scale"))?)
    } else {
        None
    };
    let protos = if dp.refrag {
        Some(LabelRows {
            start: r("start")?,
            idx: r("idx")?,
            val: bundle.f32s(&refrag_section(t, "val"))?,
        })
    } else {
        None
    };
    DefragView::validate(
        u("map")?,
        u("sizes")?,
        scale,
        protos,
        meta.n_features,
        meta.n_labels,
        dp.average,
    )
    .map_err(|source| ModelError::Defrag { tree: t, source })
}

/// REFRAG's prototypes over the input features (a model without DEFRAG), as sections
/// `refrag.input.*`.
pub fn write_input_prototypes<'a>(
    w: &mut BundleWriter<'a>,
    p: &'a Prototypes,
) -> Result<(), FormatError> {
    write_rows(w, input_prototype_section, &p.start, &p.idx, &p.val)
}

/// REFRAG's prototypes over the input features, when the bundle has them, checked in O(1) (each
/// row's offsets and columns are bounds-checked as they are read) or, when `deep`, in full. A
/// model whose metadata asks for REFRAG without DEFRAG must have them.
pub(super) fn load_input_prototypes(
    bundle: &Bundle,
    meta: &ModelMeta,
    deep: bool,
) -> Result<Option<MappedRows>, ModelError> {
    let start = input_prototype_section("start");
    if bundle.section(&start).is_none() {
        let dp = &meta.config.defrag;
        if dp.refrag && !dp.on() {
            return Err(ModelError::PrototypesMissing(start));
        }
        return Ok(None);
    }
    let rows = map_rows(bundle, input_prototype_section)?;
    if deep {
        rows.check(meta.n_labels, meta.n_features)
    } else {
        rows.check_lengths(meta.n_labels)
    }
    .map_err(ModelError::Prototypes)?;
    Ok(Some(rows))
}

// --- The OVA reranker, and the rows both input-space rerankers store ------------------------

/// The section name of the OVA reranker's array `array` (`start`, `idx`, `val`, `bias`).
pub fn ova_section(array: &str) -> String {
    format!("rerank.ova.{array}")
}

/// Adds the OVA reranker's sections (none without one, so such bundles are unchanged).
pub fn write_ova<'a>(
    w: &mut BundleWriter<'a>,
    ova: Option<&'a OvaArrays>,
) -> Result<(), FormatError> {
    if let Some(o) = ova {
        let r = &o.rows;
        write_rows(w, ova_section, &r.start, &r.idx, &r.val)?;
        w.add_f32(&ova_section("bias"), &o.bias)?;
    }
    Ok(())
}

/// The OVA reranker's sections, when the bundle has them, checked in O(1) (each scorer's
/// offsets and columns are bounds-checked as they are read) or, when `deep`, in full.
pub(super) fn load_ova(
    bundle: &Bundle,
    meta: &ModelMeta,
    deep: bool,
) -> Result<Option<MappedOva>, ModelError> {
    let start = ova_section("start");
    if bundle.section(&start).is_none() {
        if meta.config.rerank.on() {
            return Err(ModelError::RerankMissing(start));
        }
        return Ok(None);
    }
    let ova = OvaScorers {
        rows: map_rows(bundle, ova_section)?,
        bias: bundle.f32s(&ova_section("bias"))?,
    };
    if deep {
        ova.check(meta.n_labels, meta.n_features)?;
    } else {
        ova.check_lengths(meta.n_labels)?;
    }
    Ok(Some(ova))
}

/// Label-major rows as the sections `section("start")`, `section("idx")` and `section("val")`,
/// the layout both input-space rerankers store (read back by [`map_rows`]).
fn write_rows<'a>(
    w: &mut BundleWriter<'a>,
    section: fn(&str) -> String,
    start: &'a [u32],
    idx: &'a [u32],
    val: &'a [f32],
) -> Result<(), FormatError> {
    w.add_u32(&section("start"), start)?;
    w.add_u32(&section("idx"), idx)?;
    w.add_f32(&section("val"), val)?;
    Ok(())
}

/// Label-major rows stored as the sections `section("start")`, `section("idx")` and
/// `section("val")`: the layout both input-space rerankers use.
fn map_rows(bundle: &Bundle, section: fn(&str) -> String) -> Result<MappedRows, ModelError> {
    Ok(LabelRows {
        start: bundle.u32s(&section("start"))?,
        idx: bundle.u32s(&section("idx"))?,
        val: bundle.f32s(&section("val"))?,
    })
}

// --- FIAT in the input space ----------------------------------------------------------------

/// The section name of C^F's array `array` (`start`, `idx`, `val`: one row per input feature).
pub fn fiat_section(array: &str) -> String {
    format!("fiat.{array}")
}

/// Adds C^F's rows (none without `fiat.input`, so other bundles are unchanged).
pub fn write_fiat<'a>(
    w: &mut BundleWriter<'a>,
    co: Option<&'a crate::defrag::fiat::CoRows>,
) -> Result<(), FormatError> {
    if let Some(co) = co {
        write_rows(w, fiat_section, &co.start, &co.idx, &co.val)?;
    }
    Ok(())
}

/// C^F's rows, when the bundle has them, checked in O(1) (each row's offsets and columns are
/// bounds-checked as they are read) or, when `deep`, in full. A model whose metadata says
/// `fiat.input` must have them.
pub(super) fn load_fiat(
    bundle: &Bundle,
    meta: &ModelMeta,
    deep: bool,
) -> Result<Option<MappedRows>, ModelError> {
    let start = fiat_section("start");
    if bundle.section(&start).is_none() {
        if meta.config.fiat.input {
            return Err(ModelError::FiatMissing(start));
        }
        return Ok(None);
    }
    let rows = map_rows(bundle, fiat_section)?;
    if deep {
        rows.check(meta.n_features, meta.n_features)
    } else {
        rows.check_lengths(meta.n_features)
    }
    .map_err(ModelError::Fiat)?;
    Ok(Some(rows))
}

// --- The text vectorizer (read by `crate::text::TextView::open`) -------------------------

/// Adds the text vectorizer's sections to `w` (none for a model of feature vectors).
pub fn write_text<'a>(
    w: &mut BundleWriter<'a>,
    text: Option<&'a Fitted>,
) -> Result<(), FormatError> {
    if let Some(t) = text {
        w.add_bytes(crate::text::VOCAB_SECTION, &t.vocab)?;
        w.add_f32(crate::text::IDF_SECTION, &t.idf)?;
        // An empty index stands for a vectorizer fitted before there was one.
        if !t.index.slots.is_empty() {
            w.add_u32(crate::text::index::SLOTS_SECTION, &t.index.slots)?;
            w.add_bytes(crate::text::index::TERMS_SECTION, &t.index.terms)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainConfig;
    use crate::data::{Dataset, SynthParams};
    use crate::model::Model;
    use crate::train::{Quiet, TrainInputs};
    use std::collections::BTreeSet;

    #[test]
    fn patterns_match_indices_and_nothing_else() {
        let stage = |name: &str| kind_of(name).map(|k| k.stage);
        assert_eq!(stage("tree.12.chunk.hash"), Some(Stage::Tree));
        assert_eq!(stage("bp.router.out_ids"), Some(Stage::Tree));
        assert_eq!(stage("bp.3.t.chunk.row_packed"), Some(Stage::Tree));
        assert_eq!(stage("bp.3.labels"), Some(Stage::Bp));
        assert_eq!(stage("defrag.0.scale"), Some(Stage::Defrag));
        assert_eq!(stage("refrag.input.val"), Some(Stage::Refrag));
        assert_eq!(stage("text.index.terms"), Some(Stage::Text));
        assert_eq!(stage("fiat.val"), Some(Stage::Fiat));
        for name in [
            "tree.x.node_info",
            "tree..node_info",
            "tree.1",
            "bp.1.t",
            "defrag.0.maps",
        ] {
            assert_eq!(stage(name), None, "{name}");
        }
    }

    /// A small synthetic data set with `d` features.
    fn synth(d: usize) -> Dataset {
        let mut ds = crate::data::generate(&SynthParams {
            n: 300,
            d,
            l: 40,
            seed: 3,
            ..SynthParams::DEFAULT
        });
        crate::data::l2_normalize_rows(&mut ds.features);
        ds
    }

    /// Trains with `sets`, and returns the registry entries its bundle's sections fall under,
    /// after checking that each is registered with its dtype and that a verified open reads it.
    fn sections_of(ds: &Dataset, sets: &[&str], inputs: TrainInputs) -> BTreeSet<&'static str> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = TrainConfig::load(None, &sets).unwrap();
        let trained = crate::train::train(ds, &cfg, inputs, &Quiet).unwrap();
        let bundle = Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap();
        let mut kinds = BTreeSet::new();
        for s in bundle.sections() {
            let kind = kind_of(&s.name).unwrap_or_else(|| {
                panic!(
                    "{sets:?}: the trainer wrote `{}`, which the registry lacks",
                    s.name
                )
            });
            assert!(
                kind.dtypes.contains(&s.dtype),
                "{sets:?}: `{}` is {:?}, the registry says {:?}",
                s.name,
                s.dtype,
                kind.dtypes
            );
            kinds.insert(kind.name);
        }
        Model::from_bundle(bundle.clone()).unwrap();
        let unread = bundle.unread_sections();
        assert!(
            unread.is_empty(),
            "{sets:?}: the model never reads {unread:?}"
        );
        kinds
    }

    /// Every kind of model the trainer makes writes only registered sections, and opening it
    /// reads every one; between them the kinds write every registered section.
    #[test]
    fn every_written_section_is_registered_and_read() {
        let ds = synth(200);
        let mut seen = BTreeSet::new();
        for sets in [
            &["max_leaf=10"][..],
            &["trees=2", "max_leaf=10", "weights=bf16"],
            &["model=flat"],
            &[
                "bp=on",
                "block_model=tree",
                "bp_q=2",
                "bp_lambda=1",
                "max_leaf=10",
            ],
            &["defrag=xy", "d0=8", "fiat=on", "refrag=on", "max_leaf=10"],
            &["refrag=on", "max_leaf=10"],
            &["rerank_model=ova", "max_leaf=10"],
            &["fiat.input=true", "fiat.d0=4", "max_leaf=10"],
        ] {
            seen.extend(sections_of(&ds, sets, TrainInputs::default()));
        }
        let docs: Vec<String> = (0..60)
            .map(|i| format!("w{} w{} w{} common", i % 7, i % 11, i % 5))
            .collect();
        let fitted = crate::text::Fitted::fit_texts(&docs, &Default::default()).unwrap();
        let ds = synth(fitted.idf.len());
        let inputs = TrainInputs {
            label_names: Some((0..ds.n_labels()).map(|l| format!("label {l}")).collect()),
            feature_names: Some((0..ds.n_features()).map(|f| format!("f{f}")).collect()),
            text: Some(fitted),
            ..TrainInputs::default()
        };
        seen.extend(sections_of(&ds, &["max_leaf=10"], inputs));
        let never: Vec<_> = SECTIONS
            .iter()
            .map(|k| k.name)
            .filter(|n| !seen.contains(n))
            .collect();
        assert!(never.is_empty(), "no model writes the registered {never:?}");
    }
}
