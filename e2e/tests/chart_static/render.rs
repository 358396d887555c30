//! `helm template` of the chart with every CI values file (rendered once) and `helm lint`.
use super::*;

pub(crate) struct Rendered {
    pub(crate) file: String,
    /// values.yaml merged with the values file.
    pub(crate) values: Value,
    pub(crate) objects: Vec<Value>,
}

impl Rendered {
    pub(crate) fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| str_at(o, "kind") == kind).collect()
    }

    pub(crate) fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> = self.all(kind).into_iter().filter(|o| str_at(o, "metadata.name") == name).collect();
        assert_eq!(found.len(), 1, "{}: expected one {kind} {name}, found {}", self.file, found.len());
        found[0]
    }

    pub(crate) fn on(&self, path: &str) -> bool {
        get(&self.values, path).as_bool().unwrap_or(false)
    }

    pub(crate) fn v(&self, path: &str) -> &Value {
        get(&self.values, path)
    }
}

pub(crate) fn helm_template(args: &[&str]) -> Result<Vec<Value>, String> {
    let (ok, out, err) = run(Command::new(helm())
        .args(["template", RELEASE])
        .arg(chart())
        .args(["--namespace", NAMESPACE, "--kube-version", "1.35.0"])
        .args(args));
    if !ok {
        return Err(err);
    }
    // Helm separates documents with a `---` line; inside a document every such line is indented.
    let mut objects = Vec::new();
    let mut doc = String::new();
    for line in out.lines().chain(["---"]) {
        if line == "---" {
            let v: Value =
                serde_yaml::from_str(&doc).map_err(|e| format!("rendered YAML does not parse: {e}\n{doc}"))?;
            if !v.is_null() {
                objects.push(v);
            }
            doc.clear();
        } else {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    Ok(objects)
}

pub(crate) fn rendered() -> &'static [Rendered] {
    static R: OnceLock<Vec<Rendered>> = OnceLock::new();
    R.get_or_init(|| {
        let defaults = yaml(&chart().join("values.yaml"));
        ci_values_files()
            .iter()
            .map(|f| {
                let file = f.file_name().unwrap().to_string_lossy().into_owned();
                let objects = helm_template(&["-f", &f.to_string_lossy()])
                    .unwrap_or_else(|e| panic!("helm template -f {file}:\n{e}"));
                Rendered { file, values: merged(&defaults, &yaml(f)), objects }
            })
            .collect()
    })
}

#[test]
fn helm_lint_passes_with_every_ci_values_file() {
    for f in ci_values_files() {
        let (ok, out, err) = run(Command::new(helm())
            .args(["lint", "--strict"])
            .arg(chart())
            .arg("-f")
            .arg(&f)
            .args(["--kube-version", "1.35.0"]));
        assert!(ok, "helm lint --strict -f {}:\n{out}{err}", f.display());
    }
}
