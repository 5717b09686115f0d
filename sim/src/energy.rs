//! Energy accounting: power by busy slices (the model catalogue's curves) and units.

/// Watt-minutes per kilowatt-hour.
pub const WMIN_PER_KWH: f64 = 60_000.0;

/// W·min → kWh.
pub fn wmin_to_kwh(wmin: f64) -> f64 {
    wmin / WMIN_PER_KWH
}

/// Integrates a piecewise-constant power draw over time.
#[derive(Debug, Clone, Default)]
pub struct EnergyMeter {
    power_w: f64,
    last_t: f64,
    energy_wmin: f64,
}

impl EnergyMeter {
    /// A meter at time 0 drawing `power_w`.
    pub fn new(power_w: f64) -> EnergyMeter {
        EnergyMeter {
            power_w,
            last_t: 0.0,
            energy_wmin: 0.0,
        }
    }

    /// Accounts the draw up to `t` (minutes) and then changes it by `delta_w`.
    pub fn change(&mut self, t: f64, delta_w: f64) {
        self.advance(t);
        self.power_w += delta_w;
    }

    /// Accounts the draw up to `t`.
    pub fn advance(&mut self, t: f64) {
        if t > self.last_t {
            self.energy_wmin += self.power_w * (t - self.last_t);
            self.last_t = t;
        }
    }

    /// Energy so far in W·min.
    pub fn energy_wmin(&self) -> f64 {
        self.energy_wmin
    }

    /// Current draw in W.
    pub fn power_w(&self) -> f64 {
        self.power_w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_integrates_piecewise_constant_power() {
        let mut m = EnergyMeter::new(40.0);
        m.change(10.0, 79.0); // 10 min at 40 W
        m.advance(12.0); // 2 min at 119 W
        assert!((m.energy_wmin() - (400.0 + 238.0)).abs() < 1e-9);
        assert!((wmin_to_kwh(60_000.0) - 1.0).abs() < 1e-12);
    }
}
