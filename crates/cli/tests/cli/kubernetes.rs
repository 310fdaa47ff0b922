//! `cordon batch --backend kubernetes` against a scripted API server on loopback that records
//! every request and plays the kubelet: a created Job's worker is started here, on the real
//! PostgreSQL store, with the pod's paths mapped into a temp directory. The manifests are
//! checked against the Kubernetes API types: each parses into its `k8s-openapi` type and
//! serializes back to the very JSON sent, so no field is misspelt or unknown.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{Value, json};

use crate::batch::{Batch, text};
use crate::store::Pg;
use crate::support::cordon_bin;

/// One request the API server received.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    path: String,
    body: Value,
}

/// A pod: its worker (restarted on failure, as `restartPolicy: OnFailure` does), its paths.
struct Pod {
    job: Value,
    child: Option<Child>,
    exited: Option<i32>,
    restarts: u32,
    deleting: bool,
    state: PathBuf,
    /// Its container never starts (as with an image that cannot be pulled).
    stuck: bool,
}

#[derive(Default)]
struct State {
    requests: Vec<Request>,
    config_maps: BTreeMap<String, Value>,
    pods: BTreeMap<String, Pod>,
    named: u32,
    /// Answer Job creations after this many with 403, as a cluster whose quota refuses them.
    refuse_jobs_after: Option<usize>,
    /// Pad every created object's answer past what cordon reads of one (a hostile server).
    oversized_answers: bool,
    /// The `waiting` state of every new pod's container, which then never starts.
    pod_waiting: Option<Value>,
}

/// The scripted API server and kubelet.
struct Cluster {
    port: u16,
    root: PathBuf,
    state: Arc<Mutex<State>>,
}

impl Cluster {
    fn start(root: &Path) -> Cluster {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let cluster = Cluster {
            port,
            root: root.to_path_buf(),
            state: Arc::clone(&state),
        };
        let root = root.to_path_buf();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = Arc::clone(&state);
                let root = root.clone();
                std::thread::spawn(move || serve(stream, &state, &root));
            }
        });
        cluster
    }

    /// A kubeconfig naming this server (no credentials: it asks for none).
    fn kubeconfig(&self) -> PathBuf {
        let path = self.root.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: \
                 http://127.0.0.1:{}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    \
                 user: test\n    namespace: from-kubeconfig\ncurrent-context: test\nusers:\n- \
                 name: test\n  user: {{}}\n",
                self.port
            ),
        )
        .expect("write kubeconfig");
        path
    }

    fn requests(&self) -> Vec<Request> {
        self.state.lock().expect("lock").requests.clone()
    }

    /// The bodies of the requests `method` made to paths ending in `/<kind>`.
    fn created(&self, kind: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with(&format!("/{kind}")))
            .map(|r| r.body)
            .collect()
    }

    /// The paths `DELETE` was sent to.
    fn deleted(&self) -> Vec<(String, Value)> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| (r.path, r.body))
            .collect()
    }

    /// The state directory of the (only) pod of task `index`.
    fn pod_state(&self, index: u32) -> PathBuf {
        let state = self.state.lock().expect("lock");
        state
            .pods
            .values()
            .find(|p| {
                p.job["metadata"]["labels"]["cordon-task"].as_str()
                    == Some(index.to_string().as_str())
            })
            .map(|p| p.state.clone())
            .expect("a pod for the task")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut state = self.state.lock().expect("lock");
        for pod in state.pods.values_mut() {
            if let Some(child) = &mut pod.child {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>, root: &Path) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or_default().to_owned();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length.min(1 << 20)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let path = target.split('?').next().unwrap_or_default().to_owned();
        let (code, answer) = answer(state, root, &method, &path, body);
        let text = answer.to_string();
        let reason = if code < 300 { "OK" } else { "Error" };
        if write!(
            stream,
            "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )
        .is_err()
        {
            return;
        }
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
               "reason": reason, "code": code}),
    )
}

fn answer(
    state: &Mutex<State>,
    root: &Path,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let mut state = state.lock().expect("lock");
    state.requests.push(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        body: body.clone(),
    });
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // .../namespaces/NS/KIND[/NAME]
    let Some(at) = segments.iter().position(|s| *s == "namespaces") else {
        return status(404, "NotFound", "no such path");
    };
    let kind = segments.get(at + 2).copied().unwrap_or_default();
    let name = segments.get(at + 3).map(|s| (*s).to_owned());
    match (method, name) {
        ("POST", None) => {
            if kind == "jobs"
                && state
                    .refuse_jobs_after
                    .is_some_and(|n| state.pods.len() >= n)
            {
                return status(
                    403,
                    "Forbidden",
                    "jobs.batch is forbidden: User \"test\" cannot create resource \"jobs\"",
                );
            }
            let mut object = body;
            state.named += 1;
            let name = format!(
                "{}{:05}",
                object["metadata"]["generateName"].as_str().unwrap_or("x-"),
                state.named
            );
            object["metadata"]["name"] = json!(name);
            object["metadata"]["namespace"] = json!(segments[at + 1]);
            object["metadata"]["uid"] = json!(format!("uid-{}", state.named));
            match kind {
                "configmaps" => {
                    state.config_maps.insert(name, object.clone());
                }
                "jobs" => {
                    let pod_state = root.join("pods").join(&name);
                    std::fs::create_dir_all(&pod_state).expect("pod dir");
                    let mut pod = Pod {
                        job: object.clone(),
                        child: None,
                        exited: None,
                        restarts: 0,
                        deleting: false,
                        state: pod_state,
                        stuck: state.pod_waiting.is_some(),
                    };
                    if !pod.stuck {
                        pod.child = Some(start(&pod, &state.config_maps, root));
                    }
                    state.pods.insert(name, pod);
                }
                _ => {}
            }
            if state.oversized_answers {
                let mut padded = object.clone();
                padded["metadata"]["annotations"] = json!({"pad": "x".repeat(9 << 20)});
                return (201, padded);
            }
            (201, object)
        }
        ("GET", Some(name)) if kind == "jobs" => {
            let config_maps = state.config_maps.clone();
            let Some(pod) = state.pods.get_mut(&name) else {
                return status(404, "NotFound", "jobs.batch not found");
            };
            look(pod, &config_maps, root);
            if pod.deleting && pod.child.is_none() {
                state.pods.remove(&name);
                return status(404, "NotFound", "jobs.batch not found");
            }
            let mut job = pod.job.clone();
            job["status"] = match (pod.child.is_some() || pod.stuck, pod.exited) {
                (true, _) => json!({"active": 1}),
                (false, Some(0)) => json!({"succeeded": 1, "conditions": [
                    {"type": "Complete", "status": "True"}]}),
                (false, _) => json!({"failed": pod.restarts + 1, "conditions": [
                    {"type": "Failed", "status": "True"}]}),
            };
            if pod.deleting {
                job["metadata"]["deletionTimestamp"] = json!("2026-12-07T00:00:00Z");
            }
            (200, job)
        }
        ("GET", None) if kind == "pods" => {
            let waiting = state.pod_waiting.clone();
            let items: Vec<Value> = state
                .pods
                .iter()
                .filter(|(_, pod)| pod.stuck && !pod.deleting)
                .map(|(name, pod)| {
                    json!({
                        "metadata": {
                            "name": format!("{name}-pod"),
                            "labels": pod.job["spec"]["template"]["metadata"]["labels"],
                        },
                        "status": {"phase": "Pending", "containerStatuses": [{
                            "name": "cordon", "image": "registry.example.com/cordon:1",
                            "imageID": "", "ready": false, "restartCount": 0,
                            "state": {"waiting": waiting},
                        }]},
                    })
                })
                .collect();
            (
                200,
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}),
            )
        }
        ("DELETE", Some(name)) => match kind {
            "jobs" => {
                let Some(pod) = state.pods.get_mut(&name) else {
                    return status(404, "NotFound", "jobs.batch not found");
                };
                pod.deleting = true;
                if let Some(child) = &pod.child {
                    // The kubelet stops the pod's container with SIGTERM.
                    let _ = Command::new("kill")
                        .args(["-TERM", &child.id().to_string()])
                        .status();
                }
                (200, pod.job.clone())
            }
            _ => {
                if kind == "configmaps" {
                    state.config_maps.remove(&name);
                }
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                )
            }
        },
        _ => status(404, "NotFound", "not scripted"),
    }
}

/// The pod's worker ended: restarted unless it succeeded, was deleted or spent its restarts.
fn look(pod: &mut Pod, config_maps: &BTreeMap<String, Value>, root: &Path) {
    let Some(child) = &mut pod.child else { return };
    let Ok(Some(exit)) = child.try_wait() else {
        return;
    };
    let code = exit.code().unwrap_or(137);
    pod.child = None;
    pod.exited = Some(code);
    let limit = pod.job["spec"]["backoffLimit"].as_u64().unwrap_or(0);
    if code != 0 && !pod.deleting && u64::from(pod.restarts) < limit {
        pod.restarts += 1;
        pod.exited = None;
        pod.child = Some(start(pod, config_maps, root));
    }
}

/// Starts the pod's container: its command and args with the pod's paths mapped here.
fn start(pod: &Pod, config_maps: &BTreeMap<String, Value>, root: &Path) -> Child {
    let spec = &pod.job["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let mounts: BTreeMap<String, String> = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap_or_default().to_owned(),
                m["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    // The policy volume: the ConfigMap's keys as files.
    let volume = |name: &str| -> Value {
        spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let map_path = |path: &str| -> String {
        for (mount, name) in &mounts {
            if let Some(rest) = path.strip_prefix(mount.as_str()) {
                let local = match name.as_str() {
                    "state" => pod.state.clone(),
                    "policy" => {
                        let map = volume("policy")["configMap"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        let dir = root.join("config").join(&map);
                        std::fs::create_dir_all(&dir).expect("config dir");
                        for (key, text) in
                            config_maps[&map]["data"].as_object().into_iter().flatten()
                        {
                            std::fs::write(dir.join(key), text.as_str().unwrap_or_default())
                                .expect("write config");
                        }
                        dir
                    }
                    // The store's password: the test server's own file.
                    "store-password" => {
                        return std::env::var("CORDON_STORE_PASSWORD_FILE").unwrap_or_default();
                    }
                    other => root.join("volumes").join(other),
                };
                std::fs::create_dir_all(&local).ok();
                return format!("{}{rest}", local.display());
            }
        }
        path.to_owned()
    };
    let mut command = Command::new(cordon_bin());
    for arg in container["args"].as_array().into_iter().flatten() {
        command.arg(map_path(arg.as_str().unwrap_or_default()));
    }
    command.env_clear();
    command.env("PATH", "/usr/bin:/bin").env("NO_COLOR", "1");
    for var in container["env"].as_array().into_iter().flatten() {
        command.env(
            var["name"].as_str().unwrap_or_default(),
            map_path(var["value"].as_str().unwrap_or_default()),
        );
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(pod.state.with_extension("log"))
        .expect("pod log");
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the pod's worker")
}

/// The operator policy a batch's pods are configured by.
fn policy(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("policy.toml");
    std::fs::write(
        &path,
        format!(
            "[kubernetes]\nnamespace = \"cordon\"\nimage = \"registry.example.com/cordon:1\"\n\
             seccomp_profile = \"profiles/cordon.json\"\negress = [\"10.20.0.0/16\"]\n\
             store_password_secret = \"cordon-store\"\nenv_secrets = [\"model-keys\"]\n{extra}"
        ),
    )
    .expect("write policy");
    path
}

/// `cordon batch` of the tooling's pipeline on `tasks`, a Job per task on the cluster
/// `kubeconfig` names, with `store` (`None`: no `--store`).
fn on_cluster(
    b: &Batch,
    kubeconfig: &Path,
    tasks: &Path,
    policy: &Path,
    store: Option<&str>,
    extra: &[&str],
) -> Command {
    let pipeline = b.tooling.join("pipeline.yaml");
    let mut args = vec![
        "batch",
        pipeline.to_str().unwrap_or_default(),
        "--tasks",
        tasks.to_str().unwrap_or_default(),
        "--backend",
        "kubernetes",
        "--policy",
        policy.to_str().unwrap_or_default(),
    ];
    if let Some(store) = store {
        args.extend(["--store", store]);
    }
    args.extend_from_slice(extra);
    let mut command = b.cordon(&args);
    command.env("KUBECONFIG", kubeconfig);
    command
}

/// [`on_cluster`] with the store `pg`, started with its stderr piped.
fn spawn_on(b: &Batch, cluster: &Cluster, tasks: &Path, policy: &Path, pg: &Pg) -> Child {
    on_cluster(b, &cluster.kubeconfig(), tasks, policy, Some(&pg.url), &[])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cordon batch")
}

/// `value` parsed as `T` and written back: the same JSON, so every field is one of the type's.
fn typed<T: k8s_openapi::serde::de::DeserializeOwned + k8s_openapi::serde::Serialize>(
    value: &Value,
) -> T {
    let parsed: T = serde_json::from_value(value.clone()).expect("parses as the API type");
    assert_eq!(
        &serde_json::to_value(&parsed).expect("serializes"),
        value,
        "a field the API type does not have"
    );
    parsed
}

const PIPELINE: &str = "name: demo
isolation:
  memory: 1G
  cpus: 2
steps:
  - name: build
    command: echo \"built $CORDON_VAR_n\" > built.txt
";

/// A pipeline without `isolation` caps (a capped run needs cgroups an unprivileged user may
/// lack; the caps' manifest is checked where its run does not matter).
const UNCAPPED: &str = "name: demo
steps:
  - name: build
    command: echo \"built $CORDON_VAR_n\" > built.txt
";

#[test]
fn a_batch_runs_to_success_as_one_kubernetes_job_per_task_built_from_the_api_types() {
    let Some(mut pg) = Pg::new() else { return };
    let b = Batch::new(UNCAPPED);
    let cluster = Cluster::start(b.dir.path());
    let policy = policy(b.dir.path(), "");
    let tasks = b.tasks(
        "{\"id\":\"a\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n\
         {\"id\":\"b\",\"repo\":\"repo\",\"vars\":{\"n\":\"2\"}}\n",
    );
    let out = on_cluster(
        &b,
        &cluster.kubeconfig(),
        &tasks,
        &policy,
        Some(&pg.url),
        &["--jobs", "1"],
    )
    .output()
    .expect("cordon batch");
    let stderr = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let id = Batch::id(&out);
    assert!(
        stderr.contains(&format!("batch {id}: 2 of 2 tasks succeeded")),
        "{stderr}"
    );
    assert!(stderr.contains("job cordon/cordon-"), "{stderr}");
    // Each task ran in its own pod, on its own clone, with its own vars.
    for (index, n) in [(0, "1"), (1, "2")] {
        let task = if index == 0 { "a" } else { "b" };
        let clone = cluster
            .pod_state(index)
            .join("batches")
            .join(&id)
            .join(task);
        let built = std::fs::read_to_string(clone.join("built.txt"));
        assert_eq!(
            built.ok().as_deref(),
            Some(format!("built {n}\n").as_str()),
            "{task}"
        );
    }
    let finished = pg.rows(&format!(
        "SELECT count(*) FROM events e JOIN batch_tasks t ON t.run = e.run \
         WHERE t.batch = '{id}' AND e.type = 'run.finished'"
    ));
    assert_eq!(finished, ["2"]);

    // The objects, in the policy's namespace, each checked against its API type.
    let requests = cluster.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.path.contains("/namespaces/cordon/")),
        "{requests:?}"
    );
    let policies = cluster.created("networkpolicies");
    assert_eq!(policies.len(), 1);
    let network: NetworkPolicy = typed(&policies[0]);
    let spec = network.spec.expect("spec");
    assert_eq!(spec.ingress, Some(Vec::new()), "nothing in");
    let cidrs: Vec<String> = spec
        .egress
        .iter()
        .flatten()
        .flat_map(|rule| rule.to.iter().flatten())
        .filter_map(|peer| peer.ip_block.as_ref().map(|b| b.cidr.clone()))
        .collect();
    assert_eq!(cidrs, ["10.20.0.0/16"]);
    let maps = cluster.created("configmaps");
    let map: ConfigMap = typed(&maps[0]);
    let carried = map.data.and_then(|d| d.get("policy.toml").cloned());
    assert_eq!(
        carried.as_deref(),
        std::fs::read_to_string(&policy).ok().as_deref()
    );
    let jobs = cluster.created("jobs");
    assert_eq!(jobs.len(), 2, "a Job per task");
    for (index, body) in jobs.iter().enumerate() {
        let job: Job = typed(body);
        let spec = job.spec.expect("job spec");
        let pod = spec.template.spec.expect("pod spec");
        assert_eq!(pod.host_users, Some(false));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
        let security = pod.security_context.expect("pod security");
        assert_eq!(security.run_as_user, Some(1000));
        assert_eq!(security.run_as_non_root, Some(true));
        let seccomp = security.seccomp_profile.expect("seccomp");
        assert_eq!(
            (seccomp.type_.as_str(), seccomp.localhost_profile.as_deref()),
            ("Localhost", Some("profiles/cordon.json"))
        );
        assert_eq!(
            security.app_armor_profile.map(|a| a.type_).as_deref(),
            Some("Unconfined")
        );
        let container = &pod.containers[0];
        let walls = container.security_context.clone().expect("walls");
        assert_eq!(walls.proc_mount.as_deref(), Some("Unmasked"));
        assert_eq!(walls.allow_privilege_escalation, Some(false));
        assert_eq!(
            walls.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_owned()])
        );
        assert_eq!(
            container.image.as_deref(),
            Some("registry.example.com/cordon:1")
        );
        // No `isolation` caps: no requests or limits (the namespace's defaults apply).
        assert_eq!(container.resources, None);
        let args = container.args.clone().unwrap_or_default();
        let task = index.to_string();
        for want in ["work", id.as_str(), task.as_str(), "--in-pod", "--store"] {
            assert!(args.iter().any(|a| a == want), "{want}: {args:?}");
        }
        let from = container.env_from.clone().unwrap_or_default();
        assert_eq!(
            from[0].secret_ref.as_ref().map(|s| s.name.as_str()),
            Some("model-keys")
        );
    }
    // No password anywhere in what was sent.
    let password = std::env::var("CORDON_STORE_PASSWORD_FILE")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let sent: String = requests.iter().map(|r| r.body.to_string()).collect();
    assert!(!password.trim().is_empty() && !sent.contains(password.trim()));
    // What the batch made for itself is deleted when it ends.
    let deleted: Vec<String> = cluster.deleted().into_iter().map(|(p, _)| p).collect();
    assert!(
        deleted
            .iter()
            .any(|p| p.contains("/networkpolicies/cordon-")),
        "{deleted:?}"
    );
    assert!(
        deleted.iter().any(|p| p.contains("/configmaps/cordon-")),
        "{deleted:?}"
    );
}

const SLOW: &str = "name: slow
steps:
  - name: wait
    command: test -f second || (touch second && sleep 120)
";

/// `cordon batch` of SLOW's one task on `cluster`, running; and the batch id once the task's
/// step sleeps in its pod (its marker exists).
fn start_slow(b: &Batch, cluster: &Cluster, pg: &Pg) -> (Child, String) {
    let policy = policy(b.dir.path(), "");
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let mut child = spawn_on(b, cluster, &tasks, &policy, pg);
    let deadline = Instant::now() + Duration::from_secs(120);
    let marker = loop {
        let found = std::fs::read_dir(b.dir.path().join("pods"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|pod| {
                std::fs::read_dir(pod.path().join("batches"))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .map(|batch| batch.path().join("a").join("second"))
            .find(|m| m.exists());
        if let Some(found) = found {
            break found;
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            panic!("the task never started: {}", stderr_of(&mut child));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let id = marker
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .expect("batch id");
    (child, id)
}

fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    stderr
}

/// `child`'s exit code and stderr, once it ends within `limit`.
fn ended(child: &mut Child, limit: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cordon batch did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status.code(), stderr_of(child))
}

#[test]
fn an_interrupted_kubernetes_batch_deletes_its_jobs_and_leaves_the_run_resumable() {
    let Some(pg) = Pg::new() else { return };
    let b = Batch::new(SLOW);
    let cluster = Cluster::start(b.dir.path());
    let (mut child, id) = start_slow(&b, &cluster, &pg);
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let (code, stderr) = ended(&mut child, Duration::from_secs(120));
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!("cordon batch resume {id}")),
        "{stderr}"
    );
    // The Job was deleted in the foreground (its pod stopped first), and the run is resumable.
    let deleted = cluster.deleted();
    let job = deleted
        .iter()
        .find(|(path, _)| path.contains("/jobs/"))
        .unwrap_or_else(|| panic!("no Job deleted: {deleted:?}"));
    assert_eq!(job.1["propagationPolicy"], "Foreground", "{job:?}");
    let status = b.status_in(&id, &pg.url);
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].1, "interrupted", "{status:?}");
}

#[test]
fn a_worker_killed_in_its_pod_is_restarted_there_and_resumes_its_run_with_one_contiguous_log() {
    let Some(mut pg) = Pg::new() else { return };
    let b = Batch::new(SLOW);
    let cluster = Cluster::start(b.dir.path());
    let (mut child, id) = start_slow(&b, &cluster, &pg);
    // The container dies (as to the OOM killer): the pod's restart policy starts it again.
    let worker = {
        let state = cluster.state.lock().expect("lock");
        let pod = state.pods.values().next().expect("a pod");
        pod.child.as_ref().expect("running").id()
    };
    let _ = Command::new("kill")
        .args(["-KILL", &worker.to_string()])
        .status();
    let (code, stderr) = ended(&mut child, Duration::from_secs(240));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("batch {id}: 1 of 1 tasks succeeded")),
        "{stderr}"
    );
    let restarts = cluster
        .state
        .lock()
        .expect("lock")
        .pods
        .values()
        .map(|p| p.restarts)
        .sum::<u32>();
    assert_eq!(restarts, 1, "one restart, in the same pod");
    let run = pg.rows(&format!("SELECT run FROM batch_tasks WHERE batch = '{id}'"));
    let seqs = pg.rows(&format!(
        "SELECT seq FROM events WHERE run = '{}' ORDER BY seq",
        run[0]
    ));
    let want: Vec<String> = (1..=seqs.len()).map(|n| n.to_string()).collect();
    assert_eq!(seqs, want, "one contiguous log");
    let types = pg.rows(&format!(
        "SELECT type FROM events WHERE run = '{}' ORDER BY seq",
        run[0]
    ));
    assert_eq!(
        (
            types.iter().filter(|t| *t == "run.resumed").count(),
            types.last().map(String::as_str)
        ),
        (1, Some("run.finished")),
        "{types:?}"
    );
}

#[test]
fn a_kubernetes_batch_is_refused_before_it_is_recorded_without_what_the_pods_need() {
    let Some(mut pg) = Pg::new() else { return };
    let b = Batch::new(PIPELINE);
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let empty = b.dir.path().join("empty.toml");
    std::fs::write(&empty, "").expect("write");
    let full = policy(b.dir.path(), "");
    let submit = |policy: &Path, store: Option<&str>, kubeconfig: &Path| {
        on_cluster(&b, kubeconfig, &tasks, policy, store, &[])
            .output()
            .expect("cordon batch")
    };
    let nowhere = b.dir.path().join("no-kubeconfig");
    let no_store = submit(&full, None, &nowhere);
    assert_eq!(no_store.status.code(), Some(2));
    assert!(
        text(&no_store).contains("needs a shared store"),
        "{}",
        text(&no_store)
    );
    let no_settings = submit(&empty, Some(&pg.url), &nowhere);
    assert_eq!(no_settings.status.code(), Some(2));
    let said = text(&no_settings);
    assert!(
        said.contains("add `[kubernetes]`") && said.contains("seccomp_profile"),
        "{said}"
    );
    // A policy larger than a pod is given (1 MiB; a valid one, padded with a comment).
    let big = b.dir.path().join("big");
    std::fs::create_dir(&big).expect("mkdir");
    let padded = policy(&big, &format!("# {}\n", "x".repeat(1 << 20)));
    let too_large = submit(&padded, Some(&pg.url), &nowhere);
    assert_eq!(too_large.status.code(), Some(2), "{}", text(&too_large));
    assert!(
        text(&too_large).contains("larger than 1024 KiB, the most a pod is given"),
        "{}",
        text(&too_large)
    );
    // Nothing was recorded by any refusal.
    let made = pg.rows(
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() \
         AND tablename = 'batches'",
    );
    if made != ["0"] {
        assert_eq!(pg.rows("SELECT count(*) FROM batches"), ["0"]);
    }

    // A cluster reached over plain http off loopback is refused before anything is sent.
    let remote = b.dir.path().join("remote-kubeconfig");
    std::fs::write(
        &remote,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: r\n  cluster:\n    server: \
         http://192.0.2.1:8080\ncontexts:\n- name: r\n  context:\n    cluster: r\n    user: r\n\
         current-context: r\nusers:\n- name: r\n  user:\n    token: secret-token\n",
    )
    .expect("write");
    let plain = submit(&full, Some(&pg.url), &remote);
    assert_eq!(plain.status.code(), Some(2), "{}", text(&plain));
    assert!(text(&plain).contains("is not https"), "{}", text(&plain));

    // A server whose answer is larger than cordon reads of one: the call fails, naming what
    // it was about, and nothing is left behind.
    let hostile = Cluster::start(&b.dir.path().join("big"));
    hostile.state.lock().expect("lock").oversized_answers = true;
    let padded = on_cluster(&b, &hostile.kubeconfig(), &tasks, &full, Some(&pg.url), &[])
        .output()
        .expect("cordon batch");
    assert_eq!(padded.status.code(), Some(1), "{}", text(&padded));
    assert!(
        text(&padded)
            .contains("the cluster's answer about the batch's NetworkPolicy is larger than 8 MiB")
            && hostile.created("jobs").is_empty(),
        "{}",
        text(&padded)
    );

    // A cluster refusing the second Job: the error names it, the first Job is stopped, and
    // only then are the NetworkPolicy and ConfigMap deleted (no pod outlives its walls).
    let two = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n{\"id\":\"b\",\"repo\":\"repo\"}\n");
    let cluster = Cluster::start(b.dir.path());
    cluster.state.lock().expect("lock").refuse_jobs_after = Some(1);
    let refused = on_cluster(
        &b,
        &cluster.kubeconfig(),
        &two,
        &full,
        Some(&pg.url),
        &["--jobs", "2"],
    )
    .output()
    .expect("cordon batch");
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let said = text(&refused);
    assert!(
        said.contains("the cluster refused the Job of task b") && said.contains("forbidden"),
        "{said}"
    );
    let deleted: Vec<String> = cluster.deleted().into_iter().map(|(p, _)| p).collect();
    assert_eq!(deleted.len(), 3, "{deleted:?}");
    assert!(
        deleted[0].contains("/jobs/cordon-"),
        "the Job first: {deleted:?}"
    );
    // The pipeline's `isolation` caps: 1 GiB and cordon's 256 MiB, 2 CPUs, as requests and
    // limits.
    let job: Job = typed(&cluster.created("jobs")[0]);
    let pod = job.spec.and_then(|s| s.template.spec).expect("pod spec");
    let resources = pod.containers[0].resources.clone().expect("resources");
    for caps in [resources.requests, resources.limits] {
        let caps = caps.expect("caps");
        assert_eq!(caps["memory"].0, ((1u64 << 30) + (256 << 20)).to_string());
        assert_eq!(caps["cpu"].0, "2000m");
    }
}

#[test]
fn a_failed_run_ends_its_pod_without_a_restart_and_the_batch_exits_1() {
    let Some(pg) = Pg::new() else { return };
    let b = Batch::new(
        "name: failing
steps:
  - name: check
    command: exit 3
",
    );
    let cluster = Cluster::start(b.dir.path());
    let policy = policy(b.dir.path(), "");
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let out = on_cluster(
        &b,
        &cluster.kubeconfig(),
        &tasks,
        &policy,
        Some(&pg.url),
        &[],
    )
    .output()
    .expect("cordon batch");
    let stderr = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("0 of 1 tasks succeeded"), "{stderr}");
    assert!(
        stderr.contains("(log kubectl logs -n cordon job/cordon-"),
        "{stderr}"
    );
    let state = cluster.state.lock().expect("lock");
    let pod = state.pods.values().next().expect("a pod");
    assert_eq!(
        (pod.restarts, pod.exited),
        (0, Some(0)),
        "the worker said its run ended"
    );
}

#[test]
fn a_pod_that_cannot_start_is_said_with_the_clusters_reason_while_the_batch_waits() {
    let Some(pg) = Pg::new() else { return };
    let b = Batch::new(SLOW);
    let cluster = Cluster::start(b.dir.path());
    // The reason's message carries a terminal escape: it is printed escaped.
    cluster.state.lock().expect("lock").pod_waiting = Some(json!({
        "reason": "ImagePullBackOff",
        "message": "Back-off pulling image \"registry.example.com/cordon:1\"\u{1b}[2J",
    }));
    let policy = policy(b.dir.path(), "");
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let mut child = spawn_on(&b, &cluster, &tasks, &policy, &pg);
    // The pods listed twice: the reason has been said by then.
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pods"))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "the pods were never listed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let (code, stderr) = ended(&mut child, Duration::from_secs(120));
    assert_eq!(code, Some(130), "{stderr}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("waiting")).collect();
    assert_eq!(
        said,
        ["task a  waiting  ImagePullBackOff: Back-off pulling image \
             \"registry.example.com/cordon:1\"\\e[2J"],
        "said once, escaped: {stderr}"
    );
}
