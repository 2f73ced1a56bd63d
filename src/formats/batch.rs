//! The batch JSON of `webtune grad`:
//! `{"input_ids": [[..], ..], "labels": [[..], ..], "attention_mask": [[0/1 ..], ..]}`
//! (attention_mask optional), read into flat row-major arrays and checked
//! against the vocabulary. Labels use -100 for "ignore", as transformers does.

pub use crate::base::error::BatchError;
use crate::base::IGNORE_INDEX;
use serde::Deserialize;

/// A batch of `rows` sequences of `seq` tokens, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub rows: usize,
    pub seq: usize,
    /// input_ids: (rows, seq)
    pub input_ids: Vec<u32>,
    /// labels: (rows, seq), -100 = ignored
    pub labels: Vec<i32>,
    /// attention_mask: (rows, seq) of 0/1, when given
    pub attention_mask: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct RawBatch {
    input_ids: Vec<Vec<i64>>,
    labels: Vec<Vec<i64>>,
    attention_mask: Option<Vec<Vec<i64>>>,
}

/// Flatten `rows` after checking it is `expected_rows` × `seq`, checking each value.
fn flatten<T>(
    field: &'static str,
    rows: &[Vec<i64>],
    expected_rows: usize,
    seq: usize,
    check: impl Fn(i64) -> Result<T, String>,
) -> Result<Vec<T>, BatchError> {
    if rows.len() != expected_rows {
        return Err(BatchError::Rows { field, rows: rows.len(), expected: expected_rows });
    }
    let mut out = Vec::with_capacity(expected_rows * seq);
    for (row, r) in rows.iter().enumerate() {
        if r.len() != seq {
            return Err(BatchError::Ragged { field, row, len: r.len(), expected: seq });
        }
        for (col, &value) in r.iter().enumerate() {
            out.push(check(value).map_err(|reason| BatchError::Value { field, row, col, value, reason })?);
        }
    }
    Ok(out)
}

impl Batch {
    /// Parse and check a batch for a model with `vocab` tokens.
    pub fn from_json(text: &str, vocab: usize) -> Result<Batch, BatchError> {
        let raw: RawBatch = serde_json::from_str(text)?;
        let rows = raw.input_ids.len();
        if rows == 0 {
            return Err(BatchError::Empty("input_ids".into()));
        }
        let seq = raw.input_ids[0].len();
        if seq == 0 {
            return Err(BatchError::Empty("input_ids row 0".into()));
        }
        let in_vocab = |v: i64| -> Result<u32, String> {
            if v >= 0 && (v as u64) < vocab as u64 {
                Ok(v as u32)
            } else {
                Err(format!("outside the vocabulary (0..{vocab})"))
            }
        };
        let input_ids = flatten("input_ids", &raw.input_ids, rows, seq, in_vocab)?;
        let labels = flatten("labels", &raw.labels, rows, seq, |v| {
            if v == IGNORE_INDEX as i64 {
                Ok(IGNORE_INDEX)
            } else {
                in_vocab(v).map(|x| x as i32).map_err(|e| format!("{e} and not {IGNORE_INDEX}"))
            }
        })?;
        let attention_mask = match &raw.attention_mask {
            None => None,
            Some(m) => Some(flatten("attention_mask", m, rows, seq, |v| match v {
                0 | 1 => Ok(v as u32),
                _ => Err("must be 0 or 1".into()),
            })?),
        };
        Ok(Batch { rows, seq, input_ids, labels, attention_mask })
    }

    /// Next-token targets as transformers shifts them: targets[b*T+t] =
    /// labels[b*T+t+1] for t < T-1, -100 at t = T-1; with the count of targets
    /// that are not ignored.
    pub fn shifted_targets(&self) -> (Vec<i32>, usize) {
        let t_len = self.seq;
        let mut targets = vec![IGNORE_INDEX; self.rows * t_len];
        for b in 0..self.rows {
            for t in 0..t_len.saturating_sub(1) {
                targets[b * t_len + t] = self.labels[b * t_len + t + 1];
            }
        }
        let count = targets.iter().filter(|&&x| x != IGNORE_INDEX).count();
        (targets, count)
    }
}

#[cfg(test)]
mod tests {
    use crate::platform::test;

    use super::*;

    fn err(text: &str, vocab: usize) -> String {
        match Batch::from_json(text, vocab) {
            Ok(b) => panic!("expected an error, got {b:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_and_shifts() {
        let text = r#"{"input_ids": [[5, 6, 7, 8], [9, 10, 11, 12]],
                       "labels": [[-100, 6, 7, 8], [-100, -100, 11, 12]],
                       "attention_mask": [[1, 1, 1, 1], [0, 1, 1, 1]]}"#;
        let b = Batch::from_json(text, 13).expect("parses");
        assert_eq!((b.rows, b.seq), (2, 4));
        assert_eq!(b.input_ids, vec![5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(b.labels, vec![-100, 6, 7, 8, -100, -100, 11, 12]);
        assert_eq!(b.attention_mask, Some(vec![1, 1, 1, 1, 0, 1, 1, 1]));
        let (targets, n) = b.shifted_targets();
        assert_eq!(targets, vec![6, 7, 8, -100, -100, 11, 12, -100]);
        assert_eq!(n, 5);

        let b = Batch::from_json(r#"{"input_ids": [[3]], "labels": [[3]]}"#, 4).expect("parses");
        assert_eq!(b.attention_mask, None);
        assert_eq!(b.shifted_targets(), (vec![-100], 0));
    }

    #[test]
    fn names_the_problem() {
        let e = err("{\"input_ids\": [[1, 2],\n [3, 4]], \"labels\": [[1, 2], [3, 4]", 10);
        assert!(e.starts_with("batch JSON") && e.contains("line 2"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2]]}"#, 10);
        assert!(e.contains("labels"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2], [3]], "labels": [[1, 2], [3, 4]]}"#, 10);
        assert_eq!(e, "batch JSON: input_ids row 1 has 1 entries, input_ids row 0 has 2");
        let e = err(r#"{"input_ids": [[1, 2], [3, 4]], "labels": [[1, 2]]}"#, 10);
        assert_eq!(e, "batch JSON: labels has 1 rows, input_ids has 2");
        let e = err(r#"{"input_ids": [[1, 2], [3, 4]], "labels": [[1, 2], [3, 4, 5]]}"#, 10);
        assert!(e.contains("labels row 1 has 3"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2], [3, 4]], "labels": [[1, 2], [3, 4]], "attention_mask": [[1, 1]]}"#, 10);
        assert!(e.contains("attention_mask has 1 rows"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2], [3, 10]], "labels": [[1, 2], [3, 4]]}"#, 10);
        assert_eq!(e, "batch JSON: input_ids[1][1] = 10: outside the vocabulary (0..10)");
        let e = err(r#"{"input_ids": [[1, -1]], "labels": [[1, 2]]}"#, 10);
        assert!(e.contains("input_ids[0][1] = -1"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2]], "labels": [[-1, 2]]}"#, 10);
        assert!(e.contains("labels[0][0] = -1") && e.contains("-100"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2]], "labels": [[1, 12]]}"#, 10);
        assert!(e.contains("labels[0][1] = 12"), "{e}");
        let e = err(r#"{"input_ids": [[1, 2]], "labels": [[1, 2]], "attention_mask": [[1, 2]]}"#, 10);
        assert_eq!(e, "batch JSON: attention_mask[0][1] = 2: must be 0 or 1");
        let e = err(r#"{"input_ids": [], "labels": []}"#, 10);
        assert_eq!(e, "batch JSON: input_ids is empty");
        let e = err(r#"{"input_ids": [[]], "labels": [[]]}"#, 10);
        assert!(e.contains("input_ids row 0 is empty"), "{e}");
        let e = err(r#"{"input_ids": [[1.5]], "labels": [[1]]}"#, 10);
        assert!(e.starts_with("batch JSON") && e.contains("column"), "{e}");
    }
}
