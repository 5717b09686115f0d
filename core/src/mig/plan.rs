//! Transition plans between two layouts, and a model of the driver that checks them.

use std::fmt;

use super::catalogue::GpuModel;
use super::layout::{display_instance, Driver, Instance, Layout, LayoutError};

/// One driver call of a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Destroy the compute instance of a GPU instance.
    DestroyCompute(Instance),
    /// Destroy a GPU instance (its compute instance must be gone).
    DestroyGpu(Instance),
    /// Create a GPU instance with a placement.
    CreateGpu(Instance),
    /// Create the (single, full) compute instance of a GPU instance.
    CreateCompute(Instance),
}

impl Step {
    /// The instance the step acts on.
    pub fn instance(&self) -> Instance {
        match *self {
            Step::DestroyCompute(i) | Step::DestroyGpu(i) | Step::CreateGpu(i) | Step::CreateCompute(i) => i,
        }
    }

    /// A human-readable form: `destroy-gi 3g.20gb@4`.
    pub fn describe(&self, model: &GpuModel) -> String {
        let verb = match self {
            Step::DestroyCompute(_) => "destroy-ci",
            Step::DestroyGpu(_) => "destroy-gi",
            Step::CreateGpu(_) => "create-gi",
            Step::CreateCompute(_) => "create-ci",
        };
        format!("{verb} {}", display_instance(model, &self.instance()))
    }
}

/// How to get from one layout to another: what stays, what goes, what comes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Instances in both layouts: untouched.
    pub keep: Vec<Instance>,
    /// Instances only in the source layout.
    pub destroy: Vec<Instance>,
    /// Instances only in the target layout.
    pub create: Vec<Instance>,
    /// Driver calls in an order the driver accepts.
    pub steps: Vec<Step>,
}

impl Plan {
    /// Plans `from` → `to`; both must be valid layouts of `model`.
    ///
    /// All destroys come first (compute instance, then its GPU instance), then all
    /// creates (GPU instance, then its compute instance). After the destroys only kept
    /// instances remain, which are a subset of the valid target; every rule is
    /// hereditary, so each intermediate layout is valid too.
    pub fn between(
        model: &GpuModel,
        driver: Driver,
        from: &Layout,
        to: &Layout,
    ) -> Result<Plan, LayoutError> {
        from.validate(model, driver)?;
        to.validate(model, driver)?;
        let keep: Vec<Instance> = from
            .instances()
            .iter()
            .copied()
            .filter(|i| to.contains(i))
            .collect();
        let destroy: Vec<Instance> = from
            .instances()
            .iter()
            .copied()
            .filter(|i| !to.contains(i))
            .collect();
        let create: Vec<Instance> = to
            .instances()
            .iter()
            .copied()
            .filter(|i| !from.contains(i))
            .collect();
        let steps = destroy
            .iter()
            .flat_map(|&i| [Step::DestroyCompute(i), Step::DestroyGpu(i)])
            .chain(
                create
                    .iter()
                    .flat_map(|&i| [Step::CreateGpu(i), Step::CreateCompute(i)]),
            )
            .collect();
        Ok(Plan {
            keep,
            destroy,
            create,
            steps,
        })
    }

    /// Whether the plan leaves the layout as it is.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The busy instances the plan would destroy.
    pub fn touched<'a>(&'a self, busy: &'a [Instance]) -> impl Iterator<Item = &'a Instance> + 'a {
        busy.iter().filter(|b| self.destroy.contains(b))
    }

    /// Whether the plan destroys any of the busy instances.
    pub fn touches(&self, busy: &[Instance]) -> bool {
        self.touched(busy).next().is_some()
    }

    /// Printable form of the plan for one model.
    pub fn display<'a>(&'a self, model: &'a GpuModel) -> impl fmt::Display + 'a {
        PlanDisplay { plan: self, model }
    }
}

struct PlanDisplay<'a> {
    plan: &'a Plan,
    model: &'a GpuModel,
}

impl fmt::Display for PlanDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |v: &[Instance]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.iter()
                    .map(|i| display_instance(self.model, i))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        };
        writeln!(f, "keep:    {}", names(&self.plan.keep))?;
        writeln!(f, "destroy: {}", names(&self.plan.destroy))?;
        writeln!(f, "create:  {}", names(&self.plan.create))?;
        writeln!(f, "steps:")?;
        for (n, s) in self.plan.steps.iter().enumerate() {
            writeln!(f, "  {:>2}. {}", n + 1, s.describe(self.model))?;
        }
        Ok(())
    }
}

/// Why the driver model refused a step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The GPU instance to act on does not exist.
    #[error("{0}: no such GPU instance")]
    NotFound(String),
    /// The GPU instance already exists.
    #[error("{0}: GPU instance already exists")]
    Exists(String),
    /// Destroying a GPU instance that still has a compute instance, or a busy one.
    #[error("{0}: in use")]
    InUse(String),
    /// Destroying a compute instance the GPU instance does not have.
    #[error("{0}: has no compute instance")]
    NoCompute(String),
    /// Creating a compute instance where one already takes every slice.
    #[error("{0}: already has a compute instance")]
    HasCompute(String),
    /// Creating the instance would break a layout rule.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// The driver's rules as a state machine over one GPU: GPU instances, their compute
/// instances, and instances in use by a process. The simulated GPU backend and the
/// planner's tests use it.
#[derive(Debug, Clone)]
pub struct DriverModel {
    model: GpuModel,
    driver: Driver,
    layout: Layout,
    with_compute: Vec<Instance>,
    busy: Vec<Instance>,
}

impl DriverModel {
    /// A GPU in `layout` with a compute instance on every GPU instance.
    pub fn new(model: GpuModel, driver: Driver, layout: Layout) -> Result<DriverModel, LayoutError> {
        layout.validate(&model, driver)?;
        let with_compute = layout.instances().to_vec();
        Ok(DriverModel {
            model,
            driver,
            layout,
            with_compute,
            busy: Vec::new(),
        })
    }

    /// The current GPU instances.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether every GPU instance has its compute instance.
    pub fn is_settled(&self) -> bool {
        self.layout
            .instances()
            .iter()
            .all(|i| self.with_compute.contains(i))
    }

    /// Marks an instance as used by a process (destroying it then fails with IN_USE).
    pub fn set_busy(&mut self, inst: Instance, busy: bool) {
        self.busy.retain(|b| *b != inst);
        if busy {
            self.busy.push(inst);
        }
    }

    /// Applies one driver call, refusing it as the driver would.
    pub fn apply(&mut self, step: Step) -> Result<(), DriverError> {
        let name = |i: &Instance| display_instance(&self.model, i);
        match step {
            Step::DestroyCompute(i) => {
                if !self.layout.contains(&i) {
                    return Err(DriverError::NotFound(name(&i)));
                }
                if self.busy.contains(&i) {
                    return Err(DriverError::InUse(name(&i)));
                }
                if !self.with_compute.contains(&i) {
                    return Err(DriverError::NoCompute(name(&i)));
                }
                self.with_compute.retain(|c| *c != i);
            }
            Step::DestroyGpu(i) => {
                if !self.layout.contains(&i) {
                    return Err(DriverError::NotFound(name(&i)));
                }
                if self.busy.contains(&i) || self.with_compute.contains(&i) {
                    return Err(DriverError::InUse(name(&i)));
                }
                self.layout = self.layout.without(&i);
            }
            Step::CreateGpu(i) => {
                if self.layout.contains(&i) {
                    return Err(DriverError::Exists(name(&i)));
                }
                let next = self.layout.with(i);
                next.validate(&self.model, self.driver)?;
                self.layout = next;
            }
            Step::CreateCompute(i) => {
                if !self.layout.contains(&i) {
                    return Err(DriverError::NotFound(name(&i)));
                }
                if self.with_compute.contains(&i) {
                    return Err(DriverError::HasCompute(name(&i)));
                }
                self.with_compute.push(i);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::catalogue::{Catalogue, Kind};
    use crate::mig::enumerate::maximal_layouts;
    use proptest::prelude::*;

    fn a100() -> GpuModel {
        Catalogue::embedded().model("a100-40gb").unwrap().clone()
    }

    #[test]
    fn c1_to_c3_destroys_the_7g_then_creates_three() {
        let m = a100();
        let from = Layout::parse(&m, "7g@0").unwrap();
        let to = Layout::parse(&m, "4g@0 2g@4 1g*@6").unwrap();
        let p = Plan::between(&m, Driver::R510, &from, &to).unwrap();
        let steps: Vec<String> = p.steps.iter().map(|s| s.describe(&m)).collect();
        assert_eq!(
            steps,
            [
                "destroy-ci 7g.40gb@0",
                "destroy-gi 7g.40gb@0",
                "create-gi 4g.20gb@0",
                "create-ci 4g.20gb@0",
                "create-gi 2g.10gb@4",
                "create-ci 2g.10gb@4",
                "create-gi 1g.10gb@6",
                "create-ci 1g.10gb@6"
            ]
        );
    }

    #[test]
    fn a_plan_keeps_shared_instances_and_reports_busy_ones_it_touches() {
        let m = a100();
        let from = Layout::parse(&m, "4g@0 3g@4").unwrap();
        let to = Layout::parse(&m, "2g@0 2g@2 3g@4").unwrap();
        let p = Plan::between(&m, Driver::R510, &from, &to).unwrap();
        let three = Layout::parse(&m, "3g@4").unwrap().instances()[0];
        let four = Layout::parse(&m, "4g@0").unwrap().instances()[0];
        assert_eq!(p.keep, vec![three]);
        assert!(!p.touches(&[three]));
        assert!(p.touches(&[three, four]));
    }

    #[test]
    fn the_driver_model_refuses_destroying_a_gpu_instance_with_its_compute_instance() {
        let m = a100();
        let l = Layout::parse(&m, "7g@0").unwrap();
        let seven = l.instances()[0];
        let mut d = DriverModel::new(m, Driver::R510, l).unwrap();
        assert!(matches!(
            d.apply(Step::DestroyGpu(seven)),
            Err(DriverError::InUse(_))
        ));
        d.set_busy(seven, true);
        assert!(matches!(
            d.apply(Step::DestroyCompute(seven)),
            Err(DriverError::InUse(_))
        ));
    }

    /// Every maximal layout over every profile, computed once for all cases.
    fn layouts() -> &'static [Layout] {
        static ALL: std::sync::OnceLock<Vec<Layout>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| maximal_layouts(&a100(), Driver::R510, &Kind::ALL))
    }

    proptest! {
        #[test]
        fn every_plan_applied_step_by_step_reaches_its_target_legally(
            a in 0usize..1000, b in 0usize..1000, pre in any::<bool>()
        ) {
            let m = a100();
            let driver = if pre { Driver::PreR510 } else { Driver::R510 };
            let all: Vec<&Layout> = layouts().iter().filter(|l| l.validate(&m, driver).is_ok()).collect();
            let (from, to) = (all[a % all.len()], all[b % all.len()]);
            let plan = Plan::between(&m, driver, from, to).unwrap();
            let mut d = DriverModel::new(m.clone(), driver, from.clone()).unwrap();
            for s in &plan.steps {
                prop_assert!(d.apply(*s).is_ok(), "step {} refused: {:?}", s.describe(&m), d.apply(*s));
            }
            prop_assert_eq!(d.layout(), to);
            prop_assert!(d.is_settled());
        }

        #[test]
        fn a_plan_that_spares_busy_instances_runs_while_they_are_busy(
            a in 0usize..1000, b in 0usize..1000, busy_mask in any::<u8>()
        ) {
            let m = a100();
            let all = layouts();
            let (from, to) = (&all[a % all.len()], &all[b % all.len()]);
            let busy: Vec<Instance> = from.instances().iter().enumerate()
                .filter(|(i, _)| busy_mask & (1 << i) != 0).map(|(_, x)| *x).collect();
            let plan = Plan::between(&m, Driver::R510, from, to).unwrap();
            let mut d = DriverModel::new(m.clone(), Driver::R510, from.clone()).unwrap();
            for b in &busy { d.set_busy(*b, true); }
            let ok = plan.steps.iter().all(|s| d.apply(*s).is_ok());
            prop_assert_eq!(ok, !plan.touches(&busy));
        }
    }
}
