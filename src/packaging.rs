//! The operator's image is built two ways, `Containerfile` for users' pipelines and
//! `tools/images/build.sh` for the real-node tests (no registry here), and named in one
//! place, `deploy/base/kustomization.yaml`. This test holds them to one layout: binary
//! path, numeric user, command and ports.

use std::path::Path;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_containerfile_lays_the_image_out_as_the_local_build() {
    let containerfile = read("Containerfile");
    let local = read("tools/images/build.sh");
    let deployment = read("deploy/base/deployment.yaml");
    for (containerfile_line, local_part) in [
        (
            r#"ENTRYPOINT ["/usr/bin/clair-operator"]"#,
            "--config.entrypoint /usr/bin/clair-operator",
        ),
        (r#"CMD ["run"]"#, "--config.cmd run"),
        ("USER 65532:65532", "--config.user 65532:65532"),
        (
            "EXPOSE 8443 8080",
            "--config.exposedports 8443/tcp --config.exposedports 8080/tcp",
        ),
    ] {
        assert!(
            containerfile
                .lines()
                .any(|l| l.trim() == containerfile_line),
            "Containerfile lacks {containerfile_line:?}"
        );
        assert!(
            local.contains(local_part),
            "tools/images/build.sh lacks {local_part:?}"
        );
    }
    // What the Deployment relies on: the ports it names, the user its securityContext runs.
    for needed in [
        "containerPort: 8443",
        "containerPort: 8080",
        "runAsNonRoot: true",
    ] {
        assert!(deployment.contains(needed), "deploy/base lacks {needed:?}");
    }
    // The image is named once: the Deployment without a tag, kustomize `images:` with it.
    assert!(deployment.contains("image: quay.io/projectquay/clair-operator\n"));
    assert!(
        read("deploy/base/kustomization.yaml")
            .contains("- name: quay.io/projectquay/clair-operator")
    );
}
