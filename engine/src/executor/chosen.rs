//! The executor a run's Cluster chose: this machine's processes, or Kubernetes pods. One type
//! for the driver, so that everything above the seam stays the same for both.

use std::path::PathBuf;

use sluice_runtime::contract;

use super::kubernetes::Kube;
use super::local::Local;
use super::{AttemptId, Capacity, Error, Event, Executor, Handle, Placement, Probe, Reason};

pub enum Chosen {
    Local(Local),
    Kubernetes(Kube),
}

macro_rules! each {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            Chosen::Local($e) => $body,
            Chosen::Kubernetes($e) => $body,
        }
    };
}

impl Executor for Chosen {
    fn capacity(&self) -> &Capacity {
        each!(self, e => e.capacity())
    }

    fn handle(&self, id: &AttemptId) -> Handle {
        each!(self, e => e.handle(id))
    }

    fn runtime_dir(&self, id: &AttemptId) -> PathBuf {
        each!(self, e => e.runtime_dir(id))
    }

    async fn prepare(
        &mut self,
        id: &AttemptId,
        launch: &contract::Launch,
    ) -> Result<Handle, Error> {
        each!(self, e => e.prepare(id, launch).await)
    }

    async fn discard(&mut self, handle: &Handle) {
        each!(self, e => e.discard(handle).await)
    }

    async fn launch(
        &mut self,
        id: &AttemptId,
        handle: &Handle,
        launch: &contract::Launch,
        placement: &Placement,
    ) -> Result<(), Error> {
        each!(self, e => e.launch(id, handle, launch, placement).await)
    }

    async fn reattach(&mut self, id: &AttemptId, handle: &Handle) -> Result<Probe, Error> {
        each!(self, e => e.reattach(id, handle).await)
    }

    async fn result(&self, handle: &Handle) -> Option<contract::Result> {
        each!(self, e => e.result(handle).await)
    }

    async fn stop_asked(&self, handle: &Handle) -> bool {
        each!(self, e => e.stop_asked(handle).await)
    }

    async fn stop(&self, handle: &Handle, reason: Reason) -> Result<(), Error> {
        each!(self, e => e.stop(handle, reason).await)
    }

    async fn metrics(&self, handle: &Handle, metric: &str) -> Vec<(u64, f64)> {
        each!(self, e => e.metrics(handle, metric).await)
    }

    async fn log(&self, handle: &Handle, from: u64) -> Result<Vec<u8>, Error> {
        each!(self, e => e.log(handle, from).await)
    }

    fn ended(&mut self, handle: &Handle, objects: &str) {
        each!(self, e => e.ended(handle, objects))
    }

    async fn settle(&mut self) {
        each!(self, e => e.settle().await)
    }

    async fn next_event(&mut self) -> Event {
        each!(self, e => e.next_event().await)
    }

    fn halt(&mut self) {
        each!(self, e => e.halt())
    }
}
