//! MIG geometry: GPU models, profiles, placements, layouts, the named configurations,
//! transition plans between layouts, and mig-parted's config files.

pub mod assign;
pub mod catalogue;
pub mod configuration;
pub mod device_order;
pub mod enumerate;
pub mod layout;
pub mod mig_parted;
pub mod padding;
pub mod plan;

pub use assign::assign_mix;
pub use catalogue::{Catalogue, CatalogueError, GpuModel, Kind, Profile, ProfileId};
pub use configuration::{identify, read_entry, resolve_configurations, Configuration, LayoutEntry};
pub use enumerate::maximal_layouts;
pub use layout::{Driver, Instance, InstanceRecord, Layout, LayoutError};
pub use plan::{DriverError, DriverModel, Plan, Step};
