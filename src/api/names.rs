//! Kubernetes' name rules (`k8s.io/apimachinery/pkg/util/validation`), in one place for the
//! command line's checks (the CRDs state the same rules in CEL, for the apiserver).

/// A DNS-1123 label, as namespaces are named: at most 63 lowercase letters,
/// digits and '-', beginning and ending with a letter or digit. The error says the rule.
pub fn label(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a DNS-1123 label (at most 63 lowercase letters, digits and '-', \
             beginning and ending with a letter or digit)"
        ))
    }
}

/// A Service's name (DNS-1035): a [`label`] that begins with a letter.
pub fn service(name: &str) -> Result<(), String> {
    label(name)?;
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a Service name: it must begin with a letter"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_kubernetes_rules() {
        for good in ["a", "clair-operator", "0abc", &"a".repeat(63)] {
            assert!(label(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn service_names_begin_with_a_letter() {
        assert!(service("webhook").is_ok());
        assert!(service("0webhook").is_err());
        assert!(service("Webhook").is_err());
    }
}
