export { Autoscaler, type AutoscalerDeps, type ModelReplicasView, type ReplicaState } from './autoscaler.js';
