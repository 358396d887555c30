//! Whole-number fields of a YAML document, checked before the typed parse.
//!
//! Deserialized straight into a `u32`, `batchSize: -5` stopped the parse at "invalid value:
//! integer `-5`, expected u32": no field (a `serde_yaml::Value` carries no path), no range, and the
//! document's other problems were never looked at. Each field is checked here on the untyped
//! value instead, with its path, range and fix; a bad one is replaced by its smallest good value so
//! that the typed parse and the validation go on and report everything else with it.
use serde_yaml::Value;

/// A whole-number field: where it is below the value checked (`a.b`, or `a[].b` for every item of
/// the sequence `a`), and its problem for a value written as `shown`.
pub struct Field<'a> {
    pub path: &'a str,
    pub min: u64,
    pub max: u64,
    pub problem: &'a dyn Fn(&str, &str, bool) -> String,
}

/// Checks `fields` in `value`, replaces the bad ones, and returns their problems (the path as
/// written in the document, e.g. `versions[2].version`).
pub fn take_bad(value: &mut Value, fields: &[Field<'_>]) -> Vec<String> {
    let mut problems = Vec::new();
    for f in fields {
        let steps: Vec<&str> = f.path.split('.').collect();
        walk(value, &steps, String::new(), f, &mut problems);
    }
    problems
}

fn walk(value: &mut Value, steps: &[&str], at: String, f: &Field<'_>, problems: &mut Vec<String>) {
    let Some((step, rest)) = steps.split_first() else { return };
    let Value::Mapping(map) = value else { return };
    let join = |name: &str| if at.is_empty() { name.to_owned() } else { format!("{at}.{name}") };
    if let Some(name) = step.strip_suffix("[]") {
        if let Some(Value::Sequence(items)) = map.get_mut(name) {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, rest, format!("{}[{i}]", join(name)), f, problems);
            }
        }
        return;
    }
    if !rest.is_empty() {
        if let Some(inner) = map.get_mut(*step) {
            walk(inner, rest, join(step), f, problems);
        }
        return;
    }
    let Some(v) = map.get(*step) else { return };
    // A float with no fraction (YAML reads 1e20 so) is a whole number, out of range.
    let integer = v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|x| x.fract() == 0.0);
    if v.as_u64().is_some_and(|n| (f.min..=f.max).contains(&n)) {
        return;
    }
    let shown = match v {
        Value::Null => "(empty)".to_owned(),
        other => serde_yaml::to_string(other).map(|s| s.trim_end().to_owned()).unwrap_or_else(|_| "?".into()),
    };
    problems.push((f.problem)(&join(step), &shown, integer));
    // The smallest good value stands in, for a field that has no default too: the parse goes on
    // (the document is refused anyway).
    map.insert(Value::from(*step), Value::from(f.min));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(path: &str, shown: &str, integer: bool) -> String {
        format!("{path}: {shown} {}", if integer { "out" } else { "nan" })
    }

    #[test]
    fn bad_numbers_are_named_by_path_and_replaced() {
        let mut v: Value =
            serde_yaml::from_str("a: -5\nb: {c: '7'}\nd: [{e: 1}, {e: 1.5}, {e: 99999999999}, {e: 2.0e+20}]\nok: 3")
                .unwrap();
        let p = &problem;
        let fields = [
            Field { path: "a", min: 1, max: 10, problem: p },
            Field { path: "b.c", min: 1, max: 10, problem: p },
            Field { path: "d[].e", min: 1, max: 10, problem: p },
            Field { path: "ok", min: 1, max: 10, problem: p },
            Field { path: "missing.x", min: 1, max: 10, problem: p },
        ];
        let problems = take_bad(&mut v, &fields);
        assert_eq!(
            problems,
            ["a: -5 out", "b.c: '7' nan", "d[1].e: 1.5 nan", "d[2].e: 99999999999 out", "d[3].e: 2e20 out"]
                .map(String::from)
                .to_vec()
        );
        assert_eq!(
            v,
            serde_yaml::from_str::<Value>("a: 1\nb: {c: 1}\nd: [{e: 1}, {e: 1}, {e: 1}, {e: 1}]\nok: 3").unwrap()
        );
    }
}
