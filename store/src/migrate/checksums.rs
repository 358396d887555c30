//! The checksums of every text an ordered migration has had on main (migrations/released.sha384).
const RELEASED: &str = include_str!("../../../migrations/released.sha384");

/// True when `checksum` is a text of migration `version` that has landed before.
pub fn released(version: i64, checksum: &[u8]) -> bool {
    let hex = hex::encode(checksum);
    RELEASED
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .any(|(v, sum)| v.parse() == Ok(version) && sum.trim() == hex)
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha384};

    #[test]
    fn the_first_releases_texts_are_known_and_an_edited_text_is_not() {
        // `git show d9d8d2e:migrations/<file> | sha384sum`: the three migrations of release 0.1.0.
        for (version, sum) in [
            (
                20261130000001,
                "3758f3c76130494524d90a71090a5d83464d99ae6d538099bc0e856eb84fa322813c1e6cf6a59a918cf16092d898b9f8",
            ),
            (
                20261130000002,
                "4e36c9f0880697e8cbb35bf0baa8f38c8e7d7f91532aad02d672f228ff15efdbc99ab249f483db001ba3f9bf1c5a51ca",
            ),
            (
                20261130000003,
                "fff8d1d07871e762df834c9001ca7d50cdc5450fd0dfda634e188df0aaa67a54dad8bf26822b5023aac9d97b21b992c3",
            ),
        ] {
            assert!(super::released(version, &hex::decode(sum).unwrap()), "{version}");
            assert!(!super::released(version + 1, &hex::decode(sum).unwrap()), "another version's text");
        }
        assert!(!super::released(20261130000001, &Sha384::digest(b"edited locally")));
    }
}
