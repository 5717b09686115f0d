//! The sections of smartmigd's man pages that clap cannot know: what each role does, exit
//! codes, files, examples and related pages (`smartmigd manpages DIR`).

use smartmig_clidoc::PageText;

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

const CONFIG: (&str, &str) = (
    "/etc/smartmig/smartmig.toml",
    "The configuration, smartmig.toml(5); --config names another.",
);

/// The page text of `name` (`smartmigd`, `smartmigd-central`, ...).
pub fn page_text(name: &str) -> PageText {
    let mut t = PageText {
        exit_status: pairs(&[
            ("0", "Success (a role started as a service runs until stopped)."),
            ("1", "An error, printed once with its causes."),
            ("2", "Bad command line."),
            (
                "3",
                "smartmig.toml is missing or invalid; the message names the file, line and key.",
            ),
        ]),
        see_also: vec![
            "smartmigd(8)".into(),
            "smartmig(1)".into(),
            "smartmig.toml(5)".into(),
            "smartmig-doctor(1)".into(),
            "/usr/share/doc/smartmig/admin-guide.md".into(),
        ],
        files: pairs(&[CONFIG]),
        ..PageText::default()
    };
    match name {
        "smartmigd" => {
            t.description = vec![
                "smartmigd changes the MIG layouts of a Slurm cluster's GPUs while jobs run. It has two roles: smartmigd-central(8) on the Slurm controller host decides the layouts and makes Slurm see them; smartmigd-node(8) on each GPU node applies them through NVML and rewrites the node's gres.conf. They talk through the nodes' own Slurm records (Extra and Comment), so no port or secret is added.".into(),
                "Both run as systemd services: smartmigd-central.service and smartmigd-node.service, installed but not enabled.".into(),
            ];
            t.examples = pairs(&[
                (
                    "systemctl enable --now smartmigd-central",
                    "On the Slurm controller host.",
                ),
                ("systemctl enable --now smartmigd-node", "On every GPU node."),
                (
                    "smartmigd status",
                    "The central role's layouts, decisions and errors.",
                ),
            ]);
        }
        "smartmigd-central" => {
            t.description = vec![
                "The central role is a reconcile loop. Every policy.decision_interval_s seconds, or sooner after policy.decision_events job arrivals and completions, one cycle: (1) reads the GPU jobs and nodes from Slurm; (2) computes each GPU model's mean-field features and runs its policy (<policy.models_dir>/<gpu-key>-<semantics>.onnx through ONNX Runtime, or the static or periodic layout), then samples each GPU's next configuration; (3) keeps only changes that destroy no busy instance and move no running job's Slurm device index (drain mode; preempt mode requeues the jobs on changing instances and on devices whose index would move instead); (4) drains the nodes to change with the reason \"smartmig: repartition gen N\" and drops changes whose instances became busy meanwhile; (5) hands each node its plan through the node's Extra field and waits up to controller.central.report_timeout_s for the agents' reports; (6) makes Slurm see the new layouts once for the whole batch (Slurm 22.05: rewrite controller.central.nodes_include and restart slurmctld without -c), has the agents start slurmd, and resumes the nodes; (7) re-routes pending jobs whose GPU type no longer exists; (8) publishes the snapshot the job_submit plugin routes with and writes its status file.".into(),
                "A cycle interrupted anywhere is finished by the next one; nodes someone else drained are never touched. With --dry-run (or controller.mode = \"dry-run\") the same decisions, through the same limits as a live cycle, are logged and written to the status file, and nothing is changed.".into(),
            ];
            t.files = pairs(&[
                CONFIG,
                ("/usr/share/smartmig/onnx/<gpu-key>-<semantics>.onnx", "Learned policies (policy.models_dir); semantics drain or preempt by controller.mode."),
                ("/usr/lib/smartmig/libonnxruntime.so.1.32.0", "ONNX Runtime when controller.onnxruntime is unset (smartmig policy fetch-runtime --system); the unit cannot see home directories."),
                ("/run/smartmig/snapshot.json", "The snapshot the job_submit plugin reads (controller.snapshot_path)."),
                ("/var/lib/smartmig/central-status.json", "Status shown by smartmigd status (controller.state_dir)."),
                ("/etc/slurm/smartmig-nodes.conf", "The managed nodes' NodeName= lines, Included by slurm.conf (controller.central.nodes_include)."),
            ]);
            t.examples = pairs(&[
                (
                    "smartmigd central --once --dry-run",
                    "One trial cycle: decide, log, touch nothing.",
                ),
                ("systemctl enable --now smartmigd-central", "Run it as a service."),
                (
                    "journalctl -u smartmigd-central",
                    "Its log: every decision and what was done.",
                ),
            ]);
        }
        "smartmigd-node" => {
            t.description = vec![
                "The node agent runs as root on every GPU node. It reads the desired state the central role wrote in the node's Slurm record, checks that each GPU holds the layout the central role saw, changes the GPUs one driver call at a time (journaled before each call, so a crash is finished or rolled back at the next start), rewrites gres.conf in device order, stops slurmd, and reports every GPU's actual layout in the node's Comment; it starts slurmd again when told.".into(),
            ];
            t.files = pairs(&[
                CONFIG,
                (
                    "/etc/slurm/gres.conf",
                    "Rewritten after every layout change ([node] gres_conf).",
                ),
                (
                    "/var/lib/smartmig/node-journal.jsonl",
                    "The journal of driver calls ([controller] state_dir).",
                ),
                (
                    "libnvidia-ml.so.1",
                    "NVML, loaded at start ([node] backend = \"nvml\").",
                ),
            ]);
            t.examples = pairs(&[
                ("systemctl enable --now smartmigd-node", "Run it as a service."),
                (
                    "smartmigd node --once",
                    "Recover, handle the current desired state once, exit.",
                ),
            ]);
        }
        "smartmigd-status" => {
            t.exit_status[1] = ("1".into(), "The central role has written no status yet.".into());
            t.files = pairs(&[
                CONFIG,
                ("/var/lib/smartmig/central-status.json", "The status file read."),
            ]);
            t.examples = pairs(&[("smartmigd status --json", "The status file as JSON.")]);
        }
        "smartmigd-bench" => {
            t.examples = pairs(&[(
                "smartmigd bench --gpus 10000 --jobs 100000 --cycles 20",
                "The figures in BENCHMARKS.md.",
            )]);
        }
        _ => {}
    }
    t
}
