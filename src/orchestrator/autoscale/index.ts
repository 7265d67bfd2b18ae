export { Autoscaler, type AutoscalerDeps, type LoadPlan, type ModelReplicasView, type ReplicaState } from './autoscaler.js';
