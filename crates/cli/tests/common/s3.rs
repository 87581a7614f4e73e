//! A repository mirrored over a local branch and an S3 bucket.

/// cairn.toml sections: branch `disk` (local, label m) and `cloud` (the
/// bucket, labels m and c); files under `cloud/` are `single` on the
/// bucket alone, the rest `mirror:2` over both.
pub fn mirror_over_bucket(bucket: &branch::S3Config) -> String {
    format!(
        "\n[[branch]]\nname = \"disk\"\nkind = \"local\"\npath = \"br/disk\"\nlabels = [\"m\"]\n\
         \n[[branch]]\nname = \"cloud\"\nkind = \"s3\"\nendpoint = \"{}\"\nbucket = \"{}\"\n\
         access_key_id = \"{}\"\nsecret_access_key = \"{}\"\nlabels = [\"m\", \"c\"]\n\
         \n[[rule]]\nname = \"cloud-only\"\npath = \"cloud/**\"\npolicy = \"single\"\nbranches = [\"c\"]\n\
         \n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"m\"]\n",
        bucket.endpoint, bucket.bucket, bucket.access_key_id, bucket.secret_access_key
    )
}

/// cairn.toml sections: one branch `shared`, the bucket, holding
/// everything (`single`): a file system clients can share.
pub fn shared_bucket(bucket: &branch::S3Config) -> String {
    format!(
        "\n[[branch]]\nname = \"shared\"\nkind = \"s3\"\nendpoint = \"{}\"\nbucket = \"{}\"\n\
         access_key_id = \"{}\"\nsecret_access_key = \"{}\"\n\
         \n[default_rule]\npolicy = \"single\"\nbranches = [\"shared\"]\n",
        bucket.endpoint, bucket.bucket, bucket.access_key_id, bucket.secret_access_key
    )
}

/// `cairn init` at `repo`, its data on `bucket` ([`shared_bucket`]): the
/// first client of a file system others may join.
pub fn first_client(repo: &std::path::Path, bucket: &branch::S3Config) {
    super::ok(repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let text = std::fs::read_to_string(&toml).unwrap() + &shared_bucket(bucket);
    std::fs::write(&toml, text).unwrap();
}
