//! The Kubernetes backend (DESIGN §16, §18): each task of the batch becomes one Job whose pod
//! runs `cordon batch work` against the shared store, under a NetworkPolicy admitting only the
//! operator's networks. The objects are built from the API's own types (`k8s-openapi`) and sent
//! through `kube-client`; the cluster places, restarts and evicts the pods, and cordon only
//! keeps at most `--jobs` of its Jobs unfinished at once.
//!
//! The pod's walls, each a decision (docs/scale-out.md has the threat model):
//! * `hostUsers: false`: the pod's root is not the node's; cordon's own user namespaces nest in
//!   the pod's.
//! * `procMount: Unmasked`: the runtime's masked `/proc` paths would stop the sandbox mounting a
//!   fresh `/proc` in its pid namespace (the masks stay meaningful only with host users, which
//!   the pod has not).
//! * a `Localhost` seccomp profile the operator names (a node prerequisite): the runtime's
//!   default profile refuses `unshare`/`clone` of namespaces, which the sandbox is made of; the
//!   sandbox then installs its own, narrower filter on every step.
//! * AppArmor unconfined: the runtime's default profile refuses the sandbox's mounts; Landlock
//!   and seccomp inside the sandbox confine the steps.
//! * a non-root uid, every capability dropped, no privilege escalation, a read-only root
//!   filesystem, no service account token and no service links: a step that escaped the sandbox
//!   would hold nothing of the cluster's.
//! * `restartPolicy: OnFailure`: a worker killed mid-step is restarted in the same pod, whose
//!   state volume still holds the task's clone, and resumes its run through the lease. The
//!   worker exits 0 once its run has ended (`--in-pod`), so a failed run is not restarted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::{Job as KubeJob, JobSpec};
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, ConfigMap, ConfigMapVolumeSource, Container,
    EmptyDirVolumeSource, EnvFromSource, EnvVar, PersistentVolumeClaimVolumeSource, Pod as KubePod,
    PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecretEnvSource, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_client::api::{Api, DeleteParams, ListParams, PostParams};

use cordon_pipeline::Isolation;
use cordon_pipeline::policy::KubernetesPod;
use cordon_protocol::RunId;
use cordon_protocol::text::escape_line;
use cordon_store::TaskRow;

use super::{Job, Report};

/// Where the pod's state volume is mounted: the workers' state directory.
const STATE_DIR: &str = "/var/lib/cordon";
/// Where the operator policy (a ConfigMap of the batch) is mounted.
const POLICY_DIR: &str = "/etc/cordon";
const POLICY_KEY: &str = "policy.toml";
/// Where the store's password (the operator's Secret) is mounted.
const PASSWORD_DIR: &str = "/var/run/cordon/store";
/// The instance metadata address of the clouds, never reachable from a pod.
const METADATA: std::net::Ipv4Addr = std::net::Ipv4Addr::new(169, 254, 169, 254);
/// The memory a pod has beyond one sandbox's cap: cordon itself, git and the egress proxy.
const OVERHEAD: u64 = 256 << 20;
/// How many times a task's pod may fail before its Job is failed.
const BACKOFF_LIMIT: i32 = 3;
/// How long a finished Job (and its pod's log) is kept by the cluster.
const KEEP_FINISHED: i32 = 86_400;
/// How often the unfinished Jobs are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How many looks in a row may fail to read the Jobs before the submission ends.
const UNREAD_LOOKS: u64 = 30;
/// How long the deleted Jobs' pods are given to stop their runs after an interrupt.
const AFTER_CANCEL: Duration = Duration::from_secs(90);
/// How long one API call may take from its request to the last byte of its answer.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest operator policy file carried into the pods.
const MAX_POLICY: u64 = 1 << 20;
/// The most bytes of one API answer read (every answer is one object: a Job, a NetworkPolicy, a
/// ConfigMap holding at most [`MAX_POLICY`] of text, or a status); past it the call fails.
const MAX_ANSWER: usize = 8 << 20;

/// The labels every object of a batch carries: `cordon-batch`, and `cordon-task` on a task's.
fn labels(batch: RunId, task: Option<u32>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "cordon".to_owned(),
        ),
        ("cordon-batch".to_owned(), batch.to_string()),
    ]);
    if let Some(task) = task {
        labels.insert("cordon-task".to_owned(), task.to_string());
    }
    labels
}

fn meta(generate: String, batch: RunId, task: Option<u32>) -> ObjectMeta {
    ObjectMeta {
        generate_name: Some(generate),
        labels: Some(labels(batch, task)),
        ..ObjectMeta::default()
    }
}

/// What is needed of the operator's `[kubernetes]`, checked before anything is created.
pub(super) struct Settings<'a> {
    pub pod: &'a KubernetesPod,
    pub image: &'a str,
    pub seccomp_profile: &'a str,
}

impl Settings<'_> {
    /// The settings, or what the operator must add to the policy file.
    pub(super) fn check(pod: &KubernetesPod) -> Result<Settings<'_>, String> {
        match (&pod.image, &pod.seccomp_profile) {
            (Some(image), Some(seccomp_profile)) => Ok(Settings {
                pod,
                image,
                seccomp_profile,
            }),
            _ => Err(
                "the kubernetes backend needs the pod's image and seccomp profile from the \
                 operator policy: add `[kubernetes]` with `image = \"…\"` (holding cordon and \
                 git) and `seccomp_profile = \"profiles/cordon.json\"` (a Localhost profile on \
                 the nodes) to the file given with --policy"
                    .to_owned(),
            ),
        }
    }
}

/// The NetworkPolicy of the batch's pods: nothing in, and out only to the operator's networks
/// and to the cluster's DNS (the pod's resolver; the proxy resolves the pipelines' names).
pub(super) fn network_policy(batch: RunId, pod: &KubernetesPod) -> NetworkPolicy {
    let mut egress: Vec<NetworkPolicyEgressRule> = pod
        .egress
        .iter()
        .map(|cidr| NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                // Always `ADDRESS/LENGTH`: the API refuses a bare address. A network holding the
                // clouds' instance metadata address never includes it (its credentials are the
                // node's).
                ip_block: Some(IPBlock {
                    cidr: format!("{}/{}", cidr.network(), cidr.length()),
                    except: (cidr.length() < 32 && cidr.contains(METADATA.into()))
                        .then(|| vec![format!("{METADATA}/32")]),
                }),
                ..NetworkPolicyPeer::default()
            }]),
            ports: None,
        })
        .collect();
    egress.push(NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    "kube-system".to_owned(),
                )])),
                match_expressions: None,
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "k8s-app".to_owned(),
                    "kube-dns".to_owned(),
                )])),
                match_expressions: None,
            }),
            ip_block: None,
        }]),
        ports: Some(
            ["UDP", "TCP"]
                .iter()
                .map(|protocol| NetworkPolicyPort {
                    port: Some(IntOrString::Int(53)),
                    protocol: Some((*protocol).to_owned()),
                    end_port: None,
                })
                .collect(),
        ),
    });
    NetworkPolicy {
        metadata: meta(format!("cordon-{batch}-"), batch, None),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "cordon-batch".to_owned(),
                    batch.to_string(),
                )])),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(Vec::new()),
            egress: Some(egress),
        }),
    }
}

/// The ConfigMap carrying the operator policy into the batch's pods.
pub(super) fn policy_map(batch: RunId, text: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(format!("cordon-{batch}-"), batch, None),
        data: Some(BTreeMap::from([(POLICY_KEY.to_owned(), text.to_owned())])),
        ..ConfigMap::default()
    }
}

/// What a pod's caps are made of: the pipeline's `isolation` (one sandbox's caps) and how many
/// sandboxes of the run can be live at once (an outcome run's `parallel`, else 1).
#[derive(Clone, Copy)]
pub(super) struct Caps<'a> {
    pub isolation: &'a Isolation,
    pub sessions: u32,
}

impl<'a> Caps<'a> {
    pub fn of(pipeline: &'a cordon_pipeline::Pipeline) -> Caps<'a> {
        Caps {
            isolation: &pipeline.isolation,
            sessions: pipeline.outcome.as_ref().map_or(1, |o| o.parallel.get()),
        }
    }
}

/// The pod's requests and limits from `caps`: each live sandbox's memory cap plus cordon's own
/// overhead, and each one's CPUs; nothing when `isolation` sets no cap (the namespace's defaults
/// then apply).
pub(super) fn resources(caps: Caps<'_>) -> Option<ResourceRequirements> {
    let (isolation, sessions) = (caps.isolation, u64::from(caps.sessions.max(1)));
    let mut caps = BTreeMap::new();
    if let Some(memory) = isolation.memory {
        caps.insert(
            "memory".to_owned(),
            Quantity(
                memory
                    .bytes()
                    .saturating_mul(sessions)
                    .saturating_add(OVERHEAD)
                    .to_string(),
            ),
        );
    }
    if let Some(cpus) = isolation.cpus {
        caps.insert(
            "cpu".to_owned(),
            Quantity(format!("{}m", cpus.millis().saturating_mul(sessions))),
        );
    }
    (!caps.is_empty()).then(|| ResourceRequirements {
        limits: Some(caps.clone()),
        requests: Some(caps),
        ..ResourceRequirements::default()
    })
}

/// Task `task`'s Job: one pod running the worker, `config_map` the batch's policy ConfigMap.
pub(super) fn job(
    batch: RunId,
    task: &TaskRow,
    settings: &Settings<'_>,
    store: &str,
    config_map: &str,
    caps: Caps<'_>,
) -> KubeJob {
    let pod = settings.pod;
    let user = i64::from(pod.user);
    let args: Vec<String> = [
        "batch",
        "work",
        &batch.to_string(),
        "--task",
        &task.index.to_string(),
        "--in-pod",
        "--state-dir",
        STATE_DIR,
        "--store",
        store,
        "--policy",
        &format!("{POLICY_DIR}/{POLICY_KEY}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut env = vec![EnvVar {
        name: "HOME".to_owned(),
        value: Some(format!("{STATE_DIR}/home")),
        value_from: None,
    }];
    let mut mounts = vec![
        mount("state", STATE_DIR, false),
        mount("tmp", "/tmp", false),
        mount("policy", POLICY_DIR, true),
    ];
    let mut volumes = vec![
        Volume {
            name: "state".to_owned(),
            persistent_volume_claim: pod.state_claim.as_ref().map(|claim| {
                PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: Some(false),
                }
            }),
            empty_dir: pod
                .state_claim
                .is_none()
                .then(EmptyDirVolumeSource::default),
            ..Volume::default()
        },
        Volume {
            name: "tmp".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: "policy".to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map.to_owned(),
                default_mode: Some(0o444),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    if let Some(secret) = &pod.store_password_secret {
        env.push(EnvVar {
            name: "CORDON_STORE_PASSWORD_FILE".to_owned(),
            value: Some(format!("{PASSWORD_DIR}/password")),
            value_from: None,
        });
        mounts.push(mount("store-password", PASSWORD_DIR, true));
        volumes.push(Volume {
            name: "store-password".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    let env_from: Vec<EnvFromSource> = pod
        .env_secrets
        .iter()
        .map(|name| EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: name.clone(),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        })
        .collect();
    let container = Container {
        name: "worker".to_owned(),
        image: Some(settings.image.to_owned()),
        command: Some(vec![pod.program.clone()]),
        args: Some(args),
        env: Some(env),
        env_from: (!env_from.is_empty()).then_some(env_from),
        resources: resources(caps),
        volume_mounts: Some(mounts),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                add: None,
                drop: Some(vec!["ALL".to_owned()]),
            }),
            privileged: Some(false),
            proc_mount: Some("Unmasked".to_owned()),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(batch, Some(task.index))),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            host_users: Some(false),
            restart_policy: Some("OnFailure".to_owned()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_user: Some(user),
                run_as_group: Some(user),
                run_as_non_root: Some(true),
                fs_group: Some(user),
                seccomp_profile: Some(SeccompProfile {
                    type_: "Localhost".to_owned(),
                    localhost_profile: Some(settings.seccomp_profile.to_owned()),
                }),
                app_armor_profile: Some(AppArmorProfile {
                    type_: "Unconfined".to_owned(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![container],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
    };
    KubeJob {
        metadata: meta(
            format!("cordon-{batch}-{}-", task.index),
            batch,
            Some(task.index),
        ),
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            ttl_seconds_after_finished: Some(KEEP_FINISHED),
            template,
            ..JobSpec::default()
        }),
        status: None,
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

/// Whether `job` has finished: succeeded, or failed for good (its backoff spent).
fn finished(job: &KubeJob) -> bool {
    let Some(status) = &job.status else {
        return false;
    };
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        || status.succeeded.unwrap_or(0) > 0
}

/// The client for the cluster the kubeconfig (or the pod's own service account) names, its
/// namespace the policy's or the kubeconfig's. Plain `http://` is refused but on loopback: the
/// client sends the cluster's credentials with every request.
async fn client(pod: &KubernetesPod) -> Result<(kube_client::Client, String), String> {
    let mut config = kube_client::Config::infer().await.map_err(|err| {
        format!(
            "the kubernetes backend found no cluster: {}; set $KUBECONFIG (or write \
             ~/.kube/config) naming the cluster, or run cordon in a pod",
            escape_line(&err.to_string())
        )
    })?;
    let url = &config.cluster_url;
    if url.scheme_str() != Some("https") {
        // By address only: `localhost` is whatever the resolver says it is.
        let loopback = url.host().is_some_and(|host| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        });
        if !loopback {
            return Err(format!(
                "the cluster's API server {} is not https: cordon would send the cluster's \
                 credentials in the clear; name its https:// address in the kubeconfig (plain \
                 http is accepted on a loopback address only)",
                escape_line(&url.to_string())
            ));
        }
    }
    if config.proxy_url.is_some() {
        return Err(
            "the kubeconfig or $HTTPS_PROXY names a proxy for the cluster's API server, \
                    and cordon reaches the API server directly: add the server to $NO_PROXY or \
                    remove the kubeconfig's `proxy-url`"
                .to_owned(),
        );
    }
    config.read_timeout = Some(API_TIMEOUT);
    config.write_timeout = Some(API_TIMEOUT);
    config.connect_timeout = Some(API_TIMEOUT);
    let namespace = pod
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    // Every answer's body is read through `Limited`, so a hostile or broken API server cannot
    // make cordon allocate past MAX_ANSWER (the time bound is `Cluster::call`'s).
    let client = kube_client::client::ClientBuilder::try_from(config)
        .map_err(|err| format!("the kubernetes client: {}", escape_line(&err.to_string())))?
        .with_layer(&tower::util::MapResponseLayer::new(limited))
        .build();
    Ok((client, namespace))
}

/// `answer` with its body cut off at [`MAX_ANSWER`] bytes (reading past it is an error).
fn limited<B>(answer: http::Response<B>) -> http::Response<http_body_util::Limited<B>> {
    answer.map(|body| http_body_util::Limited::new(body, MAX_ANSWER))
}

/// The name the cluster gave an object cordon created: an object name (it is printed, and put in
/// the paths of later calls), else an error.
fn named(name: Option<String>, what: &str) -> anyhow::Result<String> {
    match name {
        Some(name)
            if name.len() <= 253
                && name.split('.').all(|label| {
                    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
                    label.bytes().next().is_some_and(alnum)
                        && label.bytes().last().is_some_and(alnum)
                        && label.bytes().all(|b| alnum(b) || b == b'-')
                }) =>
        {
            Ok(name)
        }
        other => anyhow::bail!(
            "the cluster named {what} it created `{}`, which is not an object name",
            escape_line(&other.unwrap_or_default())
        ),
    }
}

/// What an API call's failure says, for the user.
fn api_error(what: &str, err: &kube_client::Error) -> anyhow::Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return anyhow::anyhow!(
                "the cluster's answer about {what} is larger than {} MiB, the most cordon reads \
                 of one; check that the kubeconfig names the cluster's API server",
                MAX_ANSWER >> 20
            );
        }
        source = cause.source();
    }
    anyhow::anyhow!(
        "the cluster refused {what}: {}",
        escape_line(&err.to_string())
    )
}

/// The cluster's API, each call run to its end on the runtime (the store has its own: no call
/// to it is made from inside one of these).
struct Cluster {
    runtime: tokio::runtime::Runtime,
    namespace: String,
    policies: Api<NetworkPolicy>,
    configs: Api<ConfigMap>,
    jobs: Api<KubeJob>,
    /// The batch's pods, read to say why one waits; `None` once the cluster refused to list
    /// them (the role may not grant `pods: list`; nothing else needs it).
    pods: Option<Api<KubePod>>,
    /// The NetworkPolicy and ConfigMap made for this submission, deleted when it ends (unless a
    /// Job of it is left: its pod keeps its walls).
    made: Vec<(bool, String)>,
    /// The Jobs not finished yet: name and task index. Deleted (their pods stopped) should this
    /// submission end with them live.
    live: Vec<(String, u32)>,
    /// The Jobs did not go after their deletion: they are left, with the NetworkPolicy.
    abandoned: bool,
}

impl Cluster {
    fn connect(pod: &KubernetesPod) -> anyhow::Result<Result<Cluster, String>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (client, namespace) = match runtime.block_on(client(pod)) {
            Ok(found) => found,
            Err(message) => return Ok(Err(message)),
        };
        Ok(Ok(Cluster {
            policies: Api::namespaced(client.clone(), &namespace),
            configs: Api::namespaced(client.clone(), &namespace),
            jobs: Api::namespaced(client.clone(), &namespace),
            pods: Some(Api::namespaced(client, &namespace)),
            namespace,
            runtime,
            made: Vec::new(),
            live: Vec::new(),
            abandoned: false,
        }))
    }

    /// `future` (an API call about `what`) run to its end within [`API_TIMEOUT`], answer and
    /// all.
    fn call<T>(
        &self,
        what: &str,
        future: impl std::future::Future<Output = Result<T, kube_client::Error>>,
    ) -> anyhow::Result<T> {
        match self
            .runtime
            .block_on(async { tokio::time::timeout(API_TIMEOUT, future).await })
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(api_error(what, &err)),
            Err(_) => anyhow::bail!(
                "the cluster did not answer about {what} within {} s",
                API_TIMEOUT.as_secs()
            ),
        }
    }

    /// Why the batch's live pods wait, by task: a container that cannot start (its image, a
    /// missing Secret or ConfigMap, a refused profile) or a pod the scheduler cannot place —
    /// the cluster's reason and message, escaped and cut at [`MAX_REASON`] bytes. Nothing when
    /// the pods cannot be listed.
    fn waiting(&mut self, batch: RunId) -> Vec<(u32, String)> {
        let Some(pods) = &self.pods else {
            return Vec::new();
        };
        let params = ListParams::default()
            .labels(&format!("cordon-batch={batch}"))
            .limit(500);
        let listed = match self.call("the batch's pods", pods.list(&params)) {
            Ok(listed) => listed,
            Err(_) => {
                self.pods = None;
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for pod in listed.items {
            let task = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("cordon-task"))
                .and_then(|t| t.parse::<u32>().ok());
            if let (Some(task), Some(why)) = (task, pod.status.as_ref().and_then(pod_waits)) {
                out.push((task, why));
            }
        }
        out
    }

    /// Deletes the live Jobs in the foreground (each pod gets SIGTERM; its worker stops its run
    /// resumably) and waits, up to [`AFTER_CANCEL`], for them to go.
    fn stop_live(&mut self) {
        for (name, _) in &self.live {
            let _ = self.call("a Job", self.jobs.delete(name, &DeleteParams::foreground()));
        }
        let deadline = Instant::now() + AFTER_CANCEL;
        while !self.live.is_empty() && Instant::now() < deadline {
            std::thread::sleep(LOOK_EVERY);
            let mut kept = Vec::new();
            for (name, task) in std::mem::take(&mut self.live) {
                if !matches!(self.call("a Job", self.jobs.get_opt(&name)), Ok(None)) {
                    kept.push((name, task));
                }
            }
            self.live = kept;
        }
        if !self.live.is_empty() {
            self.abandoned = true;
            eprintln!(
                "cordon: {} of the batch's Jobs had not ended {} s after their deletion; they \
                 and the batch's NetworkPolicy are left: see `kubectl get jobs -n {}`",
                self.live.len(),
                AFTER_CANCEL.as_secs(),
                self.namespace
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.abandoned && !self.live.is_empty() {
            // An error ended the submission with Jobs running: they are stopped first, so no
            // pod outlives its NetworkPolicy.
            self.stop_live();
        }
        if self.abandoned {
            return;
        }
        for (is_policy, name) in std::mem::take(&mut self.made) {
            let params = DeleteParams::background();
            let _ = if is_policy {
                self.call("the NetworkPolicy", self.policies.delete(&name, &params))
                    .map(|_| ())
            } else {
                self.call("the ConfigMap", self.configs.delete(&name, &params))
                    .map(|_| ())
            };
        }
    }
}

/// Submits a Job per task of `waiting`, at most `jobs` unfinished at once, and waits for them,
/// printing each task as its run ends. `Err` is a usage problem (no shared store, no settings,
/// no cluster).
pub(super) fn run(
    job: &Job<'_>,
    waiting: &[TaskRow],
    jobs: u32,
    signal: &AtomicUsize,
    report: &mut Report<'_>,
    caps: Caps<'_>,
) -> anyhow::Result<Result<(), String>> {
    let (store, operator, policy_text) = match checked(job.state_dir, job.policy) {
        Ok(found) => found,
        Err(message) => return Ok(Err(message)),
    };
    let settings = match Settings::check(&operator.policy.kubernetes) {
        Ok(settings) => settings,
        Err(message) => return Ok(Err(message)),
    };
    if waiting.is_empty() {
        return Ok(Ok(()));
    }
    let mut cluster = match Cluster::connect(settings.pod)? {
        Ok(cluster) => cluster,
        Err(message) => return Ok(Err(message)),
    };
    let batch = job.batch;
    let created = cluster.call(
        "the batch's NetworkPolicy",
        cluster
            .policies
            .create(&PostParams::default(), &network_policy(batch, settings.pod)),
    )?;
    let name = named(created.metadata.name, "the NetworkPolicy")?;
    cluster.made.push((true, name));
    let created = cluster.call(
        "the batch's policy ConfigMap",
        cluster
            .configs
            .create(&PostParams::default(), &policy_map(batch, &policy_text)),
    )?;
    let config_map = named(created.metadata.name, "the ConfigMap")?;
    cluster.made.push((false, config_map.clone()));
    let pod = (&settings, store, config_map.as_str(), caps);
    submit(&mut cluster, (job, waiting, jobs, signal, report), pod)?;
    Ok(Ok(()))
}

/// A shared store and the operator's `[kubernetes]`, or what is missing.
pub(super) fn preflight(
    state_dir: &cordon_store::StateDir,
    policy: Option<&std::path::Path>,
) -> Result<(), String> {
    let (_, operator, _) = checked(state_dir, policy)?;
    Settings::check(&operator.policy.kubernetes).map(|_| ())
}

/// The shared store's URL, the operator policy, and the text it was parsed from (empty: no
/// file), which the pods are given.
fn checked<'s>(
    state_dir: &'s cordon_store::StateDir,
    policy: Option<&std::path::Path>,
) -> Result<(&'s str, crate::operator::Operator, String), String> {
    let store = state_dir.store().ok_or_else(|| {
        "the kubernetes backend needs a shared store: its workers run in pods, where they read \
         their tasks and write their runs; pass --store postgres://USER@HOST/DB (or set \
         $CORDON_STORE) that the pods can reach"
            .to_owned()
    })?;
    let (operator, text) = crate::operator::load_text(policy, None)?;
    let text = text.unwrap_or_default();
    if text.len() as u64 > MAX_POLICY {
        let shown = operator.path.as_deref().unwrap_or(std::path::Path::new(""));
        return Err(format!(
            "the operator policy {} is larger than {} KiB, the most a pod is given; move what the \
             pods do not need out of it",
            escape_line(&shown.display().to_string()),
            MAX_POLICY >> 10
        ));
    }
    Ok((store, operator, text))
}

type Batch<'a, 'j, 'r> = (
    &'a Job<'j>,
    &'a [TaskRow],
    u32,
    &'a AtomicUsize,
    &'a mut Report<'r>,
);
type Pod<'a, 'b> = (&'a Settings<'b>, &'a str, &'a str, Caps<'a>);

fn submit(
    cluster: &mut Cluster,
    (job, waiting, jobs, signal, report): Batch<'_, '_, '_>,
    (settings, store, config_map, caps): Pod<'_, '_>,
) -> anyhow::Result<()> {
    let batch = job.batch;
    let namespace = cluster.namespace.clone();
    let namespace = namespace.as_str();
    let indexes: Vec<u32> = waiting.iter().map(|t| t.index).collect();
    let mut pending: std::collections::VecDeque<&TaskRow> = waiting.iter().collect();
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    // How many looks in a row failed to read a Job.
    let mut unread = 0;
    // Why each task's pod was last said to wait.
    let mut said: BTreeMap<u32, String> = BTreeMap::new();
    loop {
        if signal.load(Ordering::SeqCst) != 0 {
            // No more Jobs; each live one is deleted in the foreground: its pod gets SIGTERM
            // (the worker appends `run.interrupted` and lets its lease go) and the Job stays
            // until the pod has ended.
            cluster.stop_live();
            return Ok(());
        }
        while cluster.live.len() < jobs as usize {
            let Some(task) = pending.pop_front() else {
                break;
            };
            let manifest = self::job(batch, task, settings, store, config_map, caps);
            let created = cluster.call(
                &format!("the Job of task {}", escape_line(&task.id)),
                cluster.jobs.create(&PostParams::default(), &manifest),
            )?;
            let name = named(created.metadata.name, "a Job")?;
            eprintln!("task {}  job {namespace}/{name}", escape_line(&task.id));
            names.insert(task.index, name.clone());
            cluster.live.push((name, task.index));
        }
        if cluster.live.is_empty() {
            break;
        }
        std::thread::sleep(LOOK_EVERY);
        let mut index = 0;
        let mut failed = None;
        while index < cluster.live.len() {
            let ended = match cluster.call("a Job", cluster.jobs.get_opt(&cluster.live[index].0)) {
                Ok(Some(found)) => finished(&found),
                Ok(None) => true,
                Err(err) => {
                    failed = Some(err);
                    false
                }
            };
            if ended {
                let (_, task) = cluster.live.swap_remove(index);
                report.tasks(&[task], &|t| log_of(namespace, &names, t), false)?;
            } else {
                index += 1;
            }
        }
        for (task, why) in cluster.waiting(batch) {
            if said.get(&task) != Some(&why)
                && let Some(row) = waiting.iter().find(|t| t.index == task)
            {
                eprintln!("task {}  waiting  {why}", escape_line(&row.id));
                said.insert(task, why);
            }
        }
        // A cluster that cannot be read for a minute ends the submission (its Jobs stopped).
        unread = if failed.is_some() { unread + 1 } else { 0 };
        if let Some(err) = failed
            && unread >= UNREAD_LOOKS
        {
            return Err(err.context(format!(
                "the batch's Jobs could not be read for {} s; see `kubectl get jobs -n \
                 {namespace} -l cordon-batch={batch}`",
                UNREAD_LOOKS * LOOK_EVERY.as_secs()
            )));
        }
    }
    report.tasks(&indexes, &|t| log_of(namespace, &names, t), false)?;
    Ok(())
}

/// The most bytes of a pod's waiting reason printed.
const MAX_REASON: usize = 300;

/// Why a pod in `status` waits, if it does for a reason worth saying: its container waiting
/// other than while it is created, or the scheduler unable to place it.
fn pod_waits(status: &k8s_openapi::api::core::v1::PodStatus) -> Option<String> {
    let said = |reason: &str, message: Option<&str>| {
        let text = match message {
            Some(message) if !message.is_empty() => format!("{reason}: {message}"),
            _ => reason.to_owned(),
        };
        let text = escape_line(&text).into_owned();
        match text.char_indices().nth(MAX_REASON) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    };
    let container = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref())
        .filter(|w| {
            w.reason
                .as_deref()
                .is_some_and(|r| r != "ContainerCreating")
        });
    if let Some(waiting) = container {
        return Some(said(
            waiting.reason.as_deref().unwrap_or_default(),
            waiting.message.as_deref(),
        ));
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            said(
                c.reason.as_deref().unwrap_or("Unschedulable"),
                c.message.as_deref(),
            )
        })
}

/// Where a task's log is: its Job's pod.
fn log_of(namespace: &str, names: &BTreeMap<u32, String>, task: &TaskRow) -> String {
    match names.get(&task.index) {
        Some(name) => format!("kubectl logs -n {namespace} job/{name}"),
        None => "no job".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(text: &str) -> KubernetesPod {
        cordon_pipeline::policy::parse("policy.toml", text)
            .expect("a valid policy")
            .kubernetes
    }

    #[test]
    fn a_pod_is_said_to_wait_for_its_container_or_its_scheduling_and_never_while_created() {
        let status = |value: serde_json::Value| -> k8s_openapi::api::core::v1::PodStatus {
            serde_json::from_value(value).expect("a pod status")
        };
        let container = |reason: &str, message: &str| {
            status(serde_json::json!({"containerStatuses": [{
                "name": "cordon", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}},
            }]}))
        };
        let long = "m".repeat(400);
        for (pod, want) in [
            (container("ContainerCreating", ""), None),
            (
                container("CreateContainerConfigError", "secret \"keys\" not found"),
                Some("CreateContainerConfigError: secret \"keys\" not found".to_owned()),
            ),
            (
                container("ErrImagePull", &long),
                Some(format!(
                    "ErrImagePull: {}…",
                    &format!("ErrImagePull: {long}")[14..300]
                )),
            ),
            (
                status(serde_json::json!({"conditions": [{"type": "PodScheduled",
                    "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available"}]})),
                Some("Unschedulable: 0/3 nodes are available".to_owned()),
            ),
            (
                status(serde_json::json!({"conditions": [{"type": "PodScheduled",
                    "status": "True"}]})),
                None,
            ),
        ] {
            assert_eq!(pod_waits(&pod), want);
        }
    }

    #[test]
    fn a_pipeline_s_isolation_caps_become_the_pod_s_requests_and_limits() {
        let mut isolation = Isolation::default();
        fn one(isolation: &Isolation) -> Caps<'_> {
            Caps {
                isolation,
                sessions: 1,
            }
        }
        assert_eq!(resources(one(&isolation)), None);
        isolation.memory = cordon_pipeline::ByteSize::parse("2G").ok();
        isolation.cpus = cordon_pipeline::Cpus::parse("1.5");
        // Three sandboxes at once (an outcome run's `parallel: 3`): three times the caps, and
        // cordon's overhead once.
        let three = resources(Caps {
            isolation: &isolation,
            sessions: 3,
        })
        .expect("caps");
        let limits = three.limits.expect("limits");
        assert_eq!(limits["cpu"], Quantity("4500m".to_owned()));
        assert_eq!(
            limits["memory"],
            Quantity((3 * (2u64 << 30) + (256 << 20)).to_string())
        );
        let caps = resources(one(&isolation)).expect("caps");
        let want = BTreeMap::from([
            ("cpu".to_owned(), Quantity("1500m".to_owned())),
            (
                "memory".to_owned(),
                Quantity(((2u64 << 30) + (256 << 20)).to_string()),
            ),
        ]);
        assert_eq!(caps.requests.as_ref(), Some(&want));
        assert_eq!(caps.limits.as_ref(), Some(&want));
    }

    #[test]
    fn the_network_policy_admits_nothing_in_and_only_the_operator_s_networks_and_dns_out() {
        let batch = RunId::from_u128(7);
        let policy = network_policy(
            batch,
            &pod("[kubernetes]\negress = [\"10.1.0.0/16\", \"fd00::/8\", \"192.0.2.7\"]\n"),
        );
        let spec = policy.spec.expect("spec");
        assert_eq!(spec.ingress, Some(Vec::new()));
        let egress = spec.egress.expect("egress");
        let cidrs: Vec<&str> = egress
            .iter()
            .flat_map(|rule| rule.to.iter().flatten())
            .filter_map(|peer| peer.ip_block.as_ref().map(|b| b.cidr.as_str()))
            .collect();
        assert_eq!(cidrs, ["10.1.0.0/16", "fd00::/8", "192.0.2.7/32"]);
        let open = network_policy(batch, &pod("[kubernetes]\negress = [\"0.0.0.0/0\"]\n"));
        let rules = open.spec.and_then(|s| s.egress).expect("egress");
        let block = rules[0].to.as_ref().and_then(|t| t[0].ip_block.clone());
        assert_eq!(
            block.and_then(|b| b.except),
            Some(vec!["169.254.169.254/32".to_owned()]),
            "the metadata service is never reachable"
        );
        assert_eq!(egress.len(), 4, "three networks and DNS");
        let dns = egress.last().expect("dns");
        assert!(dns.to.iter().flatten().all(|p| p.ip_block.is_none()));
        assert_eq!(dns.ports.as_ref().map(Vec::len), Some(2));
        let selector = spec.pod_selector.and_then(|s| s.match_labels);
        assert_eq!(
            selector.and_then(|l| l.get("cordon-batch").cloned()),
            Some(batch.to_string())
        );
    }

    #[test]
    fn a_policy_without_an_image_or_seccomp_profile_is_refused_with_the_keys_to_add() {
        for text in [
            "",
            "[kubernetes]\nimage = \"registry.example.com/cordon:1\"\n",
            "[kubernetes]\nseccomp_profile = \"profiles/cordon.json\"\n",
        ] {
            let pod = pod(text);
            let err = Settings::check(&pod).err().expect(text);
            assert!(
                err.contains("`image = ") && err.contains("seccomp_profile"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_name_the_cluster_gives_is_taken_only_when_it_is_an_object_name() {
        assert_eq!(
            named(Some("cordon-01m-0-abcde".to_owned()), "a Job").ok(),
            Some("cordon-01m-0-abcde".to_owned())
        );
        for bad in [
            None,
            Some(String::new()),
            Some("a/../b".to_owned()),
            Some("..".to_owned()),
            Some(".".to_owned()),
            Some("a..b".to_owned()),
            Some("x\u{1b}[2J".to_owned()),
            Some("A".to_owned()),
            Some("a".repeat(254)),
        ] {
            let err = named(bad.clone(), "a Job")
                .expect_err("refused")
                .to_string();
            assert!(
                err.contains("is not an object name") && !err.contains('\u{1b}'),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn a_job_is_finished_when_complete_failed_or_succeeded() {
        use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
        let with = |status: Option<JobStatus>| KubeJob {
            status,
            ..KubeJob::default()
        };
        let condition = |type_: &str, status: &str| JobStatus {
            conditions: Some(vec![JobCondition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        };
        assert!(!finished(&with(None)));
        assert!(!finished(&with(Some(JobStatus {
            active: Some(1),
            ..JobStatus::default()
        }))));
        assert!(finished(&with(Some(condition("Complete", "True")))));
        assert!(finished(&with(Some(condition("Failed", "True")))));
        assert!(!finished(&with(Some(condition("Failed", "False")))));
        assert!(!finished(&with(Some(condition("Suspended", "True")))));
        assert!(finished(&with(Some(JobStatus {
            succeeded: Some(1),
            ..JobStatus::default()
        }))));
    }
}
